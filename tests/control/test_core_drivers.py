"""One core, two drivers: the same job script run by the service (real time, real local pods,
real HTTP) and by the simulator (virtual time, virtual backend) feeds the broker core the same
events and gets the same actions back. Neither driver decides anything of its own: where they
differ it is in timing only, which the comparison leaves out (timers' no-op events)."""

from __future__ import annotations

import functools
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from firepool.control.actions import Action, StartAttempt
from firepool.control.core import BrokerCore
from firepool.model import PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.sim.broker import JobRequest, SimBroker
from firepool.sim.loop import EventLoop
from firepool.sim.venue import PRESETS
from firepool.testing.service import running_broker, submit, wait_job

POOL = PoolSpec(name="cpu", min_count=1, max_idle_count=1, max_count=2, idle_timeout=600.0,
                memory_mib_per_pod=512, step=1)
#: (lease tag, max retries, exit code of the first attempt): a warm reuse, a session switch
#: (the pod serves one job and retires), then a failure retried once on the same session.
Script = list[tuple[str, int, int]]
SCRIPT: Script = [("a", 0, 0), ("a", 0, 0), ("b", 0, 0), ("b", 1, 3)]
#: Events a driver's own timers raise; here they must change nothing.
TIMERS = {"tick", "resync"}
EVENTS = ("submit", "resync", "cancel", "dispatch", "committed", "commit_lost",
          "judge_before_reset", "attempt_over", "verdict_recorded", "reconcile", "pod_ready",
          "pod_failed", "pod_deleted", "tick")
#: The retry exits 0: FIREPOOL_ATTEMPT is `<job>:<retry>`.
FAIL_FIRST = ("import os, sys; "
              "sys.exit({code} if os.environ['FIREPOOL_ATTEMPT'].endswith(':0') else 0)")

Trace = list[tuple[str, tuple[str, ...]]]


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> dict[int, Trace]:
    """Every core's (event, actions) in call order, per core."""
    seen: dict[int, Trace] = {}
    for name in EVENTS:
        original = getattr(BrokerCore, name)

        def recorded(self: BrokerCore, *args: Any, _f: Callable[..., Any] = original,
                     _name: str = name, **kwargs: Any) -> Any:
            actions = _f(self, *args, **kwargs)
            seen.setdefault(id(self), []).append((_name, tuple(map(_describe, actions))))
            return actions

        monkeypatch.setattr(BrokerCore, name, functools.wraps(original)(recorded))
    return seen


def _describe(action: Action) -> str:
    if isinstance(action, StartAttempt):
        return "StartAttempt(" + ",".join(p.path.value for p in action.lease.pods) + ")"
    return type(action).__name__


def decisions(trace: Trace) -> Trace:
    """The events that led to something, without timers' no-ops and bare wake-ups."""
    return [(event, acts) for event, acts in trace
            if event == "submit" or (acts and event not in TIMERS and acts != ("Dispatch",))]


def wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def run_service(tmp_path: Path, script: Script) -> BrokerCore:
    """Runs the script; returns the broker's core (other tests' brokers may still be winding
    down in this process, each with its own core, so traces are told apart by core)."""
    quiet = BrokerConfig(dispatch_tick_s=600.0, reconcile_s=600.0, hold_tick_s=600.0,
                         exit_poll_s=600.0)
    with running_broker(tmp_path, catalog=Catalog((POOL,), {"cpu": 4}), config=quiet) as broker:
        service = broker.embedded.broker
        wait_until(lambda: broker.call(
            lambda: any(p.state.value == "idle" for p in service.tracker.pool_pods("cpu"))))
        with broker.client() as client:
            for tag, retries, code in script:
                body = FAIL_FIRST.format(code=code) if code else "pass"
                job = submit(client, pool="cpu", lease_tag=tag, max_retries=retries,
                             command=[sys.executable, "-c", body])
                assert wait_job(client, job)["state"] == "SUCCEEDED"
                wait_until(lambda: broker.call(lambda: not service.core.running
                                               and not service.pods._tasks))
        return service.core


def run_sim(script: Script) -> BrokerCore:
    loop = EventLoop()
    broker = SimBroker(loop, PRESETS["production-cpu"], [POOL], {"cpu": 4}, random.Random(0),
                       reconcile_s=600.0, dispatch_tick_s=600.0)
    broker.warm_up()
    for tag, retries, code in script:
        job = broker.submit(JobRequest("local", "cpu", 0.1, tag=tag, max_retries=retries,
                                       exit_codes=(code,) if code else ()))
        loop.run(stop=lambda j=job: broker.records[j].state.terminal)
        assert broker.records[job].state.value == "SUCCEEDED"
        loop.run(until=loop.now + 120.0)  # deletions and resets settle, as in the service
    return broker.core


def test_the_service_and_the_simulator_get_the_same_actions(
    tmp_path: Path, traces: dict[int, Trace]
) -> None:
    service_core = run_service(tmp_path / "service", SCRIPT)
    sim_core = run_sim(SCRIPT)  # both cores stay alive, so their ids stay distinct
    service, sim = traces[id(service_core)], traces[id(sim_core)]
    assert decisions(service) == decisions(sim)
    starts = [acts for event, acts in decisions(sim) if event == "dispatch"]
    assert ("StartAttempt(warm)",) in starts and ("StartAttempt(recycled)",) in starts


def test_the_comparison_sees_a_different_decision(
    tmp_path: Path, traces: dict[int, Trace]
) -> None:
    """The comparison can fail: the same script with one session switch fewer (as a driver
    that dropped the lease tag would run it) gives other actions."""
    service_core = run_service(tmp_path / "service", SCRIPT)
    sim_core = run_sim([("a", r, c) for _tag, r, c in SCRIPT])
    service, sim = traces[id(service_core)], traces[id(sim_core)]
    assert decisions(service) != decisions(sim)

"""One core, two drivers: the same job script run by the service (real time, real local pods,
real HTTP) and by the simulator (virtual time, virtual backend) feeds the broker core the same
events and gets the same actions back, and tells it of the same attempt ends (what each
attempt's verdict is judged from). Neither driver decides anything of its own: where they
differ it is in timing only, which the comparison leaves out (timers' no-op events). A gang
whose rank 1 fails checks the gang-exit rule (control/gang.py) the two drivers share: the
other rank is stopped and the end names rank 1, in both. A cancel that arrives while the pods of
a retryable failure are reset turns the retry into CANCELLED, in both."""

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
from firepool.control.dispatch import AttemptEnd
from firepool.model import PoolSpec, Topology
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.sim.broker import JobRequest, SimBroker
from firepool.sim.loop import EventLoop
from firepool.sim.venue import PRESETS
from firepool.testing.control import cpu_pool
from firepool.testing.service import running_broker, submit, wait_job

POOL = cpu_pool(min_count=1, max_idle_count=1, max_count=2, idle_timeout=600.0,
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
#: A gang of two on a pool of two (network host, as a gang's pool must be): its first attempt
#: fails on rank 1 and is retried once on the same, warm pods.
GANG_POOL = cpu_pool(network="host", min_count=2, max_idle_count=2, max_count=2,
                     idle_timeout=600.0, memory_mib_per_pod=512, step=2)
GANG_SCRIPT: Script = [("g", 1, 3)]
GANG_FAILING_RANK = 1
#: In the first attempt rank 1 exits with {code} and rank 0 sleeps past the test's bound: it
#: ends only because the gang rule had the broker stop it. The retry's ranks exit 0.
GANG_FAILS = ("import os, sys, time\n"
              "if os.environ['FIREPOOL_ATTEMPT'].endswith(':0'):\n"
              "    if os.environ['RANK'] == '{rank}': sys.exit({code})\n"
              "    time.sleep(120)\n")

Trace = list[tuple[str, tuple[str, ...]]]
#: Per core, what to do once `judge_before_reset` has judged a retry (nothing went out yet, the
#: pods' reset is still to come): the test's cancel, sent the way each driver gets one.
OnRetry = dict[int, Callable[[str], None]]


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


@pytest.fixture
def ends(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[AttemptEnd]]:
    """Every attempt end a core was told of (before and with the reset), per core."""
    seen: dict[int, list[AttemptEnd]] = {}
    for name in ("judge_before_reset", "attempt_over"):
        original = getattr(BrokerCore, name)

        def recorded(self: BrokerCore, job: str, end: AttemptEnd, *args: Any,
                     _f: Callable[..., Any] = original, **kwargs: Any) -> Any:
            seen.setdefault(id(self), []).append(end)
            return _f(self, job, end, *args, **kwargs)

        monkeypatch.setattr(BrokerCore, name, functools.wraps(original)(recorded))
    return seen


@pytest.fixture
def on_retry(monkeypatch: pytest.MonkeyPatch, traces: dict[int, Trace]) -> OnRetry:
    """Wraps `judge_before_reset` over the recording (so the trace shows the judging first)."""
    hooks: OnRetry = {}
    original = BrokerCore.judge_before_reset

    def judged(self: BrokerCore, job: str, end: AttemptEnd, now: float) -> Any:
        actions = original(self, job, end, now)
        hook = hooks.get(id(self))
        if hook is not None and not actions and job in self.running:
            hook(job)
        return actions

    monkeypatch.setattr(BrokerCore, "judge_before_reset", functools.wraps(original)(judged))
    return hooks


def _describe(action: Action) -> str:
    if isinstance(action, StartAttempt):
        return "StartAttempt(" + ",".join(p.path.value for p in action.lease.pods) + ")"
    return type(action).__name__


#: The core holds a retired pod's deletion back until the attempt's verdict is stored: it goes
#: out with `attempt_over` when the verdict was stored during the reset, or with
#: `verdict_recorded` when the write was still out. Which of the two came first is timing.
HELD_BACK = {"attempt_over", "verdict_recorded"}


def decisions(trace: Trace) -> Trace:
    """The events that led to something, without timers' no-ops and bare wake-ups, and
    without the deletions held back for a verdict (`deletions` counts those)."""
    kept: Trace = []
    for event, acts in trace:
        if event in HELD_BACK:
            acts = tuple(a for a in acts if a != "DeletePod")
        if event == "submit" or (acts and event not in TIMERS and acts != ("Dispatch",)):
            kept.append((event, acts))
    return kept


def deletions(trace: Trace) -> int:
    """How many pods the core deleted, whichever event let each go."""
    return sum(acts.count("DeletePod") for _event, acts in trace)


def wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def run_service(
    tmp_path: Path, script: Script, pool: PoolSpec = POOL, cancel_retries: OnRetry | None = None
) -> BrokerCore:
    """Runs the script, each job on `pool.min_count` pods (a torchrun gang when more than
    one); returns the broker's core (other tests' brokers may still be winding down in this
    process, each with its own core, so traces are told apart by core). With
    `cancel_retries`, a failing job is cancelled as its retry is judged, as the API does it:
    the store records the request, then the broker hears of it."""
    quiet = BrokerConfig(dispatch_tick_s=600.0, reconcile_s=600.0, hold_tick_s=600.0,
                         exit_poll_s=600.0)
    pods = pool.min_count
    gang = {"pods": pods, "topology": "torchrun"} if pods > 1 else {}
    with running_broker(tmp_path, catalog=Catalog((pool,), {"cpu": 4}), config=quiet) as broker:
        service = broker.embedded.broker
        if cancel_retries is not None:
            cancel_retries[id(service.core)] = lambda job: service.cancel_requested(
                service.store.cancel(job, now=service.clock()))
        wait_until(lambda: broker.call(lambda: sum(
            p.state.value == "idle" for p in service.tracker.pool_pods("cpu")) >= pods))
        with broker.client() as client:
            for tag, retries, code in script:
                if not code:
                    body = "pass"
                elif pods > 1:
                    body = GANG_FAILS.format(code=code, rank=GANG_FAILING_RANK)
                else:
                    body = FAIL_FIRST.format(code=code)
                job = submit(client, pool="cpu", lease_tag=tag, max_retries=retries,
                             command=[sys.executable, "-c", body], **gang)
                expected = "CANCELLED" if code and cancel_retries is not None else "SUCCEEDED"
                assert wait_job(client, job)["state"] == expected
                wait_until(lambda: broker.call(lambda: not service.core.running
                                               and not service.pods._tasks))
        return service.core


def run_sim(
    script: Script, pool: PoolSpec = POOL, failing_rank: int = GANG_FAILING_RANK,
    cancel_retries: OnRetry | None = None,
) -> BrokerCore:
    loop = EventLoop()
    broker = SimBroker(loop, PRESETS["production-cpu"], [pool], {"cpu": 4}, random.Random(0),
                       reconcile_s=600.0, dispatch_tick_s=600.0)
    if cancel_retries is not None:
        cancel_retries[id(broker.core)] = broker.cancel
    broker.warm_up()
    pods = pool.min_count
    topology = Topology.TORCHRUN if pods > 1 else Topology.NONE
    for tag, retries, code in script:
        job = broker.submit(JobRequest("local", "cpu", 0.1, tag=tag, max_retries=retries,
                                       exit_codes=(code,) if code else (), pods=pods,
                                       topology=topology, failing_rank=failing_rank))
        loop.run(stop=lambda j=job: broker.records[j].state.terminal)
        expected = "CANCELLED" if code and cancel_retries is not None else "SUCCEEDED"
        assert broker.records[job].state.value == expected
        loop.run(until=loop.now + 120.0)  # deletions and resets settle, as in the service
    return broker.core


def test_the_service_and_the_simulator_get_the_same_actions(
    tmp_path: Path, traces: dict[int, Trace], ends: dict[int, list[AttemptEnd]]
) -> None:
    service_core = run_service(tmp_path / "service", SCRIPT)
    sim_core = run_sim(SCRIPT)  # both cores stay alive, so their ids stay distinct
    service, sim = traces[id(service_core)], traces[id(sim_core)]
    assert decisions(service) == decisions(sim)
    assert deletions(service) == deletions(sim) > 0
    assert ends[id(service_core)] == ends[id(sim_core)]
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


def test_a_failing_gang_rank_gets_the_same_actions_and_end_from_both_drivers(
    tmp_path: Path, traces: dict[int, Trace], ends: dict[int, list[AttemptEnd]]
) -> None:
    """Rank 1 of a torchrun gang fails while rank 0 runs on: in both drivers the gang rule
    stops rank 0 (the service's job ends at all only because of that), the attempt's end
    carries rank 1's exit code and names it, and the retry runs on the same warm pods."""
    service_core = run_service(tmp_path / "service", GANG_SCRIPT, GANG_POOL)
    sim_core = run_sim(GANG_SCRIPT, GANG_POOL)
    service, sim = traces[id(service_core)], traces[id(sim_core)]
    assert decisions(service) == decisions(sim)
    starts = [acts for event, acts in decisions(sim) if event == "dispatch"]
    assert starts == [("StartAttempt(warm,warm)",)] * 2, starts
    assert ends[id(service_core)] == ends[id(sim_core)]
    failed = ends[id(sim_core)][0]
    assert (failed.exit_code, failed.signal, failed.cancelled) == (3, None, False)
    assert failed.message == "rank 1 failed first; the other ranks were stopped"
    # The comparison of ends can fail: the same gang failing on rank 0 ends otherwise.
    other = run_sim(GANG_SCRIPT, GANG_POOL, failing_rank=0)
    assert ends[id(other)] != ends[id(service_core)]


def test_a_cancel_during_the_reset_of_a_retryable_failure_gets_the_same_actions_from_both(
    tmp_path: Path, traces: dict[int, Trace], on_retry: OnRetry
) -> None:
    """The failing job of the script is cancelled once its retry is judged, while its pods
    are reset: both drivers get the cancel's stop, then an `attempt_over` whose verdict is
    CANCELLED (the jobs end so, checked in each run), and neither starts the retry."""
    service_core = run_service(tmp_path / "service", SCRIPT, cancel_retries=on_retry)
    sim_core = run_sim(SCRIPT, cancel_retries=on_retry)
    service, sim = traces[id(service_core)], traces[id(sim_core)]
    assert decisions(service) == decisions(sim)
    assert deletions(service) == deletions(sim)
    for trace in (service, sim):
        last = len(trace) - 1 - [event for event, _ in reversed(trace)].index("committed")
        after = [(event, acts) for event, acts in trace[last + 1:]
                 if acts or event == "judge_before_reset"]
        assert after[:3] == [("judge_before_reset", ()), ("cancel", ("StopAttempt",)),
                             ("attempt_over", ("HoldPod", "RecordVerdict", "Reconcile",
                                               "Dispatch"))], after
    starts = [a for _event, acts in sim for a in acts if a.startswith("StartAttempt")]
    assert len(starts) == len(SCRIPT)  # the cancelled retry never started

"""Orphaned pods end (issue 13, item 3): an agent whose broker has been silent longer than
its bound ends its pod, every process of it and itself, on real processes."""

from __future__ import annotations

import os
import signal
import time

import pytest
from pod_helpers import EventSink, backend_at, make_pod, pods_processes, py

from firepool.agent import procfs
from firepool.backends.agent_client import AgentClient
from firepool.backends.base import MIN_BROKER_SILENCE_S, silence_bound
from firepool.backends.local import LocalBackend
from firepool.model import ConfigError, UnavailableError
from firepool.protocol import LaunchRequest
from firepool.testing.control import cpu_pool
from firepool.testing.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

POOL = cpu_pool(memory_mib_per_pod=256)


def test_an_agent_whose_broker_went_silent_ends_its_pod_and_its_job() -> None:
    with backend_at("orphan", broker_silence_s=1.0) as (backend, loop, root):
        record, client = loop.run(make_pod(backend, POOL))
        sleep = py("import time; time.sleep(600)")
        launched = loop.run(client.launch(LaunchRequest(attempt="orphan-1:0", argv=sleep)))
        assert procfs.alive(launched.pid) and procfs.alive(record.pid)
        # nobody speaks to the agent from now on
        deadline = time.monotonic() + 60
        while procfs.alive(record.pid) or procfs.alive(launched.pid):
            assert time.monotonic() < deadline, "the orphaned pod is still running"
            time.sleep(0.05)
        assert pods_processes(root, backend.uids_handed_out) == []

        def listed_dead() -> bool:
            (listed,) = loop.run(backend.list_pods())
            return not listed.alive

        # The next broker's recovery deletes it. Its agent's main thread shows as a zombie
        # while its other threads still exit, and until they have it cannot be reaped (so
        # not yet seen dead by the backend, which asks waitpid): a moment, longer under load.
        wait_until("the backend sees the pod dead", listed_dead, timeout=30)


def test_the_silence_bound_is_the_pools_keep_alive_by_default() -> None:
    assert silence_bound(None, POOL) is None
    assert silence_bound(2.5, POOL) == 2.5
    long = cpu_pool(idle_timeout=300.0)
    assert silence_bound("keep-alive", long) == 300.0
    short = cpu_pool(idle_timeout=1.0)
    assert silence_bound("keep-alive", short) == MIN_BROKER_SILENCE_S  # outlasts a restart


@pytest.mark.parametrize("bad", [0, -1.0, "soon"])
def test_a_bad_silence_bound_is_refused_naming_the_field(tmp_path: object, bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        LocalBackend(f"{tmp_path}/pods", broker_silence_s=bad)  # type: ignore[arg-type]
    assert err.value.field == "broker_silence_s"


def test_an_agent_stopped_past_its_bound_fences_its_attempt_when_it_resumes() -> None:
    """A partition seen from inside (SIGSTOP): on SIGCONT the agent kills the attempt, which
    its broker has long declared lost, and never reports its exit."""
    sink = EventSink()
    try:
        with backend_at("fence", broker_silence_s=1.0) as (backend, loop, root):
            record, client = loop.run(make_pod(backend, POOL, callback_url=sink.url))
            sleep = py("import time; time.sleep(600)")
            launched = loop.run(client.launch(LaunchRequest(attempt="fence-1:0", argv=sleep)))
            os.kill(record.pid, signal.SIGSTOP)
            try:
                # the broker's view: the agent stops answering for longer than the bound
                silent = AgentClient(record.agent_url, record.secret, timeout=1.5)
                with pytest.raises(UnavailableError):
                    loop.run(silent.health())
            finally:
                os.kill(record.pid, signal.SIGCONT)
            deadline = time.monotonic() + 60
            while procfs.alive(launched.pid) or procfs.alive(record.pid):
                assert time.monotonic() < deadline, "the fenced attempt still runs"
                time.sleep(0.05)
            assert pods_processes(root, backend.uids_handed_out) == []
        assert [e.attempt for e in sink.events] == []  # its exit was never reported
    finally:
        sink.close()

"""What wakes whom in the core: a deleted pod's room goes to a job waiting for capacity at
once, not at the dispatcher's fallback tick (seconds later)."""

from __future__ import annotations

from firepool.control.actions import Reconcile
from firepool.testing.control import cpu_pool
from firepool.testing.core_driver import StepDriver


def _full_pool_with_a_held_pod() -> StepDriver:
    d = StepDriver.of([cpu_pool(min_count=0, max_count=1, idle_timeout=100)], {"cpu": 4})
    d.submit("alice", "cpu")
    while d.starting:
        d.ready()
    d.finish()  # alice's pod is held for her: the pool is at its ceiling
    return d


def test_a_deletion_wakes_the_scaler_for_a_job_waiting_for_capacity() -> None:
    d = _full_pool_with_a_held_pod()
    bob = d.submit("bob", "cpu")
    d.act(d.core.reconcile("cpu", d.now))
    assert d.starting == [] and bob in d.core.queued  # no room while alice's pod lives
    d.now += 10_000
    d.act(d.core.tick(d.now))  # her hold ran out: the pod is being deleted
    assert len(d.deleting) == 1 and d.starting == []
    d.deleted()  # and nothing else happens: no tick, no reconcile pass of the test's
    assert len(d.starting) == 1  # the scaler ordered bob's pod
    d.ready()
    assert d.launched == [bob]


def test_a_deletion_nobody_waits_for_wakes_nobody() -> None:
    d = _full_pool_with_a_held_pod()
    d.now += 10_000
    d.act(d.core.tick(d.now))
    (pod,) = d.deleting
    assert not any(isinstance(a, Reconcile) for a in d.core.pod_deleted(pod, d.now))

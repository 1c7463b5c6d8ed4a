"""Factories for control-plane tests: pools, trackers with ready pods, claim requests."""

from __future__ import annotations

from typing import Any

from firepool.control.records import ClaimRequest, Lease, Wait
from firepool.control.tracker import Tracker
from firepool.model import PodRole, PoolSpec


def cpu_pool(name: str = "cpu", **knobs: Any) -> PoolSpec:
    """A pool with `PoolSpec`'s defaults; every keyword reaches `PoolSpec` unchanged.

    Tests build pools through this and `gpu_pool` (tests/test_layout.py checks it); only the
    tests of `PoolSpec`'s own validation construct it directly.
    """
    return PoolSpec(name=name, **knobs)


def gpu_pool(name: str = "gpu", **knobs: Any) -> PoolSpec:
    """One H200 per pod unless `accelerator` / `accelerators_per_pod` say otherwise."""
    knobs.setdefault("accelerator", "H200")
    knobs.setdefault("accelerators_per_pod", 1)
    return PoolSpec(name=name, **knobs)


def ready_pods(
    tracker: Tracker, pool: str, count: int, now: float = 0.0, prefix: str = ""
) -> list[str]:
    """Add `count` pods to `pool` and mark them ready; GPU pods each get their own group."""
    gpu = tracker.pool_spec(pool).is_gpu
    names = []
    start = len(tracker)
    for i in range(count):
        name = f"{prefix or pool}-{start + i}"
        tracker.add_pod(name, pool, now, group=name if gpu else None)
        tracker.pod_ready(name, now)
        names.append(name)
    return names


def ready_standby(tracker: Tracker, pool: str, group: str, name: str, now: float = 0.0) -> str:
    tracker.add_pod(name, pool, now, role=PodRole.STANDBY, group=group)
    tracker.pod_ready(name, now)
    return name


def request(job: str, caller: str = "alice", pool: str = "cpu", **fields: Any) -> ClaimRequest:
    return ClaimRequest(job=job, caller=caller, pool=pool, **fields)


def lease(outcome: Lease | Wait) -> Lease:
    """The lease from a claim that must have succeeded."""
    assert isinstance(outcome, Lease), outcome
    return outcome


def run_job(tracker: Tracker, req: ClaimRequest, now: float, unclean: bool = False) -> Lease:
    """Claim, launch and release one job: a whole loop step."""
    got = lease(tracker.claim(req, now))
    for pod in got.pods:
        tracker.mark_running(pod.name)
    tracker.release(req.job, now + 1.0, unclean=[p.name for p in got.pods] if unclean else ())
    return got

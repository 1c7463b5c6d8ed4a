"""The reconcile plan of appendix A.5, rule by rule, with worked numbers."""

from __future__ import annotations

from firepool.control.records import RetireReason
from firepool.control.scaler import DedicatedCreate, QueuedDemand, ScalerConfig, plan
from firepool.control.tracker import Tracker
from firepool.testing.control import (
    cpu_pool,
    gpu_pool,
    lease,
    ready_pods,
    ready_standby,
    request,
    run_job,
)


def plan_for(t: Tracker, pool: str, queued: list[QueuedDemand], now: float, **kw: object):  # type: ignore[no-untyped-def]
    return plan(t.pool_spec(pool), t.pool_pods(pool), t.pool_groups(pool), queued, now, **kw)  # type: ignore[arg-type]


def queue(n: int, caller: str = "alice") -> list[QueuedDemand]:
    return [QueuedDemand(caller) for _ in range(n)]


def test_add_is_the_larger_deficit_capped_by_ceiling_step_and_headroom() -> None:
    t = Tracker([cpu_pool(min_count=2, max_count=10, step=3)])
    # floorDeficit = 2, demandDeficit = 5 -> min(5, 10 - 0, 3, inf) = 3
    assert plan_for(t, "cpu", queue(5), 0.0).create == 3
    # headroom of 2 cores at 1 core per pod caps it at 2
    assert plan_for(t, "cpu", queue(5), 0.0, headroom_units=2).create == 2
    # with no demand the floor alone: min(2, 10, 3) = 2
    assert plan_for(t, "cpu", [], 0.0).create == 2


def test_headroom_counts_gpus_of_multi_gpu_pods() -> None:
    t = Tracker([gpu_pool(accelerators_per_pod=2, max_count=10, step=10)])
    # 5 GPUs of headroom fit two 2-GPU pods
    assert plan_for(t, "gpu", queue(4), 0.0, headroom_units=5).create == 2


def test_starting_pods_are_supply_and_the_ceiling_binds() -> None:
    t = Tracker([cpu_pool(max_count=6, step=10)])
    for i in range(3):
        t.add_pod(f"s{i}", "cpu", 0.0)
    p = plan_for(t, "cpu", queue(5), 1.0)
    assert (p.census.starting, p.census.demand, p.census.eligible) == (3, 5, 3)
    assert p.create == 2  # not another 5
    p = plan_for(t, "cpu", queue(9), 1.0)
    assert p.create == 3  # ceiling 6 - physical 3
    assert p.blocked_at_ceiling


def test_held_pods_count_toward_ceiling_but_are_supply_only_for_their_owner() -> None:
    t = Tracker([cpu_pool(max_count=4, idle_timeout=100)])
    ready_pods(t, "cpu", 2)
    lease(t.claim(request("a1", caller="alice"), 1.0))
    lease(t.claim(request("a2", caller="alice", tag="t2"), 1.0))
    t.release("a1", 2.0)
    t.release("a2", 2.0)
    # Two held pods for alice; bob queues 2: held pods are no supply for him.
    p = plan_for(t, "cpu", queue(2, "bob"), 5.0)
    assert (p.census.held, p.census.idle, p.census.physical) == (2, 0, 2)
    assert p.create == 2
    # Alice queues 1: one held pod counts as idle for her.
    p = plan_for(t, "cpu", queue(1, "alice"), 5.0)
    assert (p.census.held, p.census.idle, p.create) == (1, 1, 0)


def test_scale_down_removes_only_expired_idle_and_keeps_idle_cap_and_floor() -> None:
    spec = cpu_pool(min_count=1, max_idle_count=2, max_count=10, idle_timeout=60)
    t = Tracker([spec])
    ready_pods(t, "cpu", 5, now=0.0)
    assert plan_for(t, "cpu", [], 59.0).retire == []  # nothing expired yet
    p = plan_for(t, "cpu", [], 60.0)
    # idleCap = min(2, 10 - (5 - 5)) = 2; retain = max(2, 1 - 0, 0) = 2;
    # remove = min(5 - 2, 5 expired, 5 - 1) = 3
    assert len(p.retire) == 3
    assert all(r.reason is RetireReason.SCALE_DOWN for r in p.retire)


def test_scale_down_never_goes_below_the_floor() -> None:
    t = Tracker([cpu_pool(min_count=3, max_count=10, idle_timeout=10)])
    ready_pods(t, "cpu", 4)
    p = plan_for(t, "cpu", [], 100.0)
    assert len(p.retire) == 1  # physical 4 - floor 3


def test_four_knobs_serverless_ttl() -> None:
    """floor = idle cap = 0 with keep-alive τ: pods live τ after their last use, then go."""
    t = Tracker([cpu_pool(min_count=0, max_idle_count=0, idle_timeout=30, max_count=8)])
    assert plan_for(t, "cpu", [], 0.0).create == 0  # nothing pre-created
    assert plan_for(t, "cpu", queue(2), 0.0).create == 2
    ready_pods(t, "cpu", 2, now=1.0)
    assert plan_for(t, "cpu", [], 30.9).retire == []
    assert len(plan_for(t, "cpu", [], 31.0).retire) == 2


def test_four_knobs_static_cluster() -> None:
    """floor = peak with τ = ∞: the pool is created at zero demand and never shrinks."""
    t = Tracker([cpu_pool(min_count=4, max_idle_count=4, max_count=4, idle_timeout=1e18)])
    assert plan_for(t, "cpu", [], 0.0).create == 4
    ready_pods(t, "cpu", 4)
    assert plan_for(t, "cpu", [], 1e9).retire == []
    assert plan_for(t, "cpu", queue(10), 1e9).create == 0


def test_four_knobs_kubernetes_job() -> None:
    """Single-use pods: one created per job, deleted at release, never shared."""
    t = Tracker([cpu_pool(max_count=8)])
    su = [QueuedDemand("alice", single_use=True) for _ in range(3)]
    p = plan_for(t, "cpu", su, 0.0)
    assert p.create == 0
    assert p.create_dedicated == [DedicatedCreate(True, None)] * 3
    t.add_pod("su-0", "cpu", 0.0, single_use=True)
    p = plan_for(t, "cpu", su, 1.0)
    assert len(p.create_dedicated) == 2  # the starting one counts
    assert p.census.single_use == 1
    assert p.census.physical == 1


def test_single_use_pods_occupy_the_ceiling_but_not_the_floor() -> None:
    t = Tracker([cpu_pool(min_count=2, max_count=3)])
    t.add_pod("su-0", "cpu", 0.0, single_use=True)
    t.add_pod("su-1", "cpu", 0.0, single_use=True)
    p = plan_for(t, "cpu", [], 0.0)
    # floorDeficit = 2 - (2 - 2) = 2, but ceiling 3 - physical 2 leaves room for 1
    assert p.create == 1


def test_hold_breaking_at_the_ceiling_oldest_first_past_tenure_sparing_waiting_owners() -> None:
    t = Tracker([cpu_pool(max_count=3, idle_timeout=1000)])
    ready_pods(t, "cpu", 3, now=0.0)
    run_job(t, request("a", caller="alice"), 10.0)  # held since 11
    run_job(t, request("b", caller="bob"), 20.0)  # held since 21
    run_job(t, request("c", caller="carol"), 30.0)  # held since 31
    queued = queue(1, "dave") + queue(1, "carol")
    # Before the 60 s tenure nothing is broken.
    assert plan_for(t, "cpu", queued, 59.0).retire == []
    p = plan_for(t, "cpu", queued, 100.0)
    assert p.blocked_at_ceiling
    # dave's one pod: the oldest hold (alice's); carol waits, so hers is spared.
    assert [(t.get(r.pod).owner, r.reason) for r in p.retire] == [
        ("alice", RetireReason.HOLD_BROKEN)
    ]


def test_stale_pods_drain_within_the_budget() -> None:
    spec = cpu_pool(max_count=10, min_count=3)
    t = Tracker([spec])
    ready_pods(t, "cpu", 3)
    t.set_pool(spec.model_copy(update={"template_version": 2}))
    p = plan_for(t, "cpu", [], 1.0, config=ScalerConfig(drain_budget=1))
    assert [r.reason for r in p.retire] == [RetireReason.STALE_TEMPLATE]
    # Stale pods still occupy physical capacity, so replacements follow the drain.
    assert (p.census.stale, p.create) == (3, 0)
    t.retire(p.retire[0].pod, RetireReason.STALE_TEMPLATE)
    p = plan_for(t, "cpu", [], 2.0, config=ScalerConfig(drain_budget=1))
    assert p.retire == []  # one retiring at a time
    t.pod_deleted("cpu-0")
    p = plan_for(t, "cpu", [], 3.0, config=ScalerConfig(drain_budget=1))
    assert p.create == 1 and len(p.retire) == 1


def test_gpu_group_counts_once_and_standbys_are_staged_but_never_supply() -> None:
    t = Tracker([gpu_pool(standbys_per_active=3, max_count=2, step=8)])
    (g0,) = ready_pods(t, "gpu", 1)
    ready_standby(t, "gpu", g0, "sb-0")
    p = plan_for(t, "gpu", [], 1.0)
    assert p.census.physical == 1
    assert p.create_standbys == [g0, g0]  # up to 1 active + 3 standbys
    lease(t.claim(request("j", pool="gpu"), 1.0))
    p = plan_for(t, "gpu", queue(3), 2.0)
    # demand 3 + 1 busy; eligible: the group counts busy once -> deficit 3, ceiling leaves 1
    assert (p.census.running + p.census.assigned, p.census.physical, p.create) == (1, 1, 1)


def test_idle_group_with_a_standby_is_supply_for_anyone() -> None:
    t = Tracker([gpu_pool(standbys_per_active=1, max_count=4, idle_timeout=100)])
    (g0,) = ready_pods(t, "gpu", 1)
    ready_standby(t, "gpu", g0, "sb")
    run_job(t, request("a", pool="gpu", caller="alice"), 1.0)
    p = plan_for(t, "gpu", queue(1, "bob"), 3.0)
    assert (p.census.idle, p.census.held, p.create) == (1, 0, 0)


def test_plan_is_plain_data_and_changes_nothing() -> None:
    spec = cpu_pool(min_count=2)
    t = Tracker([spec])
    before = len(t)
    p = plan_for(t, "cpu", queue(3), 0.0)
    assert not p.empty and len(t) == before

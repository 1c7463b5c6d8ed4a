"""The reconcile plan with every output checked: the whole census, creates, dedicated creates,
standbys, retirements in order and `stable_until`, on CPU and GPU pools holding pods of every
class at once (see docs/testing.md, "Mutation testing"). Only `scaler.plan` is called, on real
pod and group records; each expected number is worked out by hand in the comments."""

from __future__ import annotations

from firepool.control.records import Group, Pod, Retired, RetireReason
from firepool.control.scaler import Census, DedicatedCreate, QueuedDemand, ScalerConfig, plan
from firepool.model import PodRole, PodState
from firepool.testing.control import cpu_pool, gpu_pool

S = PodState
SD, HB, ST = RetireReason.SCALE_DOWN, RetireReason.HOLD_BROKEN, RetireReason.STALE_TEMPLATE


def pod(
    name: str,
    state: PodState,
    *,
    pool: str = "cpu",
    idle_since: float = 0.0,
    created: float = 0.0,
    owner: str | None = None,
    template: int = 1,
    single_use: bool = False,
    image: str | None = None,
    group: str | None = None,
    role: PodRole = PodRole.ACTIVE,
    hold_until: float = 0.0,
) -> Pod:
    p = Pod(
        name,
        pool,
        role=role,
        group=group,
        created_at=created,
        template=template,
        single_use=single_use,
        image=image,
    )
    p.state = state
    p.idle_since = idle_since
    p.owner = owner
    p.hold_until = hold_until
    return p


def groups_of(pods: list[Pod]) -> list[Group]:
    out: dict[str, Group] = {}
    for p in pods:
        assert p.group is not None
        out.setdefault(p.group, Group(p.group, p.pool)).pods.add(p.name)
    return list(out.values())


def q(caller: str, n: int = 1, **kw: object) -> list[QueuedDemand]:
    return [QueuedDemand(caller, **kw) for _ in range(n)]  # type: ignore[arg-type]


CPU = cpu_pool(min_count=2, max_count=20, max_idle_count=0, idle_timeout=100.0, step=10)


def every_cpu_class() -> list[Pod]:
    return [
        pod("s0", S.STARTING),
        pod("i0", S.IDLE, idle_since=0.0),  # expired at 150 (0 + 100 <= 150)
        pod("i1", S.IDLE, idle_since=100.0),  # idle until 200
        pod("i2", S.IDLE, idle_since=120.0),  # idle until 220
        pod("h0", S.HELD, idle_since=121.0, owner="alice", hold_until=221.0),
        pod("h1", S.HELD, idle_since=90.0, owner="erin", hold_until=190.0, created=5.0),
        pod("a0", S.ASSIGNED),
        pod("r0", S.RUNNING),
        pod("r1", S.RUNNING),
        pod("d0", S.IDLE, single_use=True),
        pod("d1", S.STARTING, image="img"),
        pod("d2", S.RUNNING, single_use=True),
        pod("d3", S.ASSIGNED, image="img"),
        pod("d4", S.HELD, single_use=True),
        pod("x0", S.RETIRING),
        pod("t0", S.IDLE, template=0),  # an old template: stale, whatever its state
        pod("t1", S.HELD, template=0, owner="erin"),
        pod("t2", S.STARTING, template=0),
        pod("z0", S.STALE, created=3.0),
        pod("z1", S.STALE, created=1.0),
    ]


def test_cpu_census_of_every_class_with_dedicated_demand() -> None:
    queued = q("alice") + q("dave", 2) + q("x", 3, single_use=True) + q("y", image="img")
    p = plan(CPU, every_cpu_class(), [], queued, 150.0, headroom_units=5)
    # held: h0 matched by alice's queued job (counts as idle), h1 not; busy = a0 + r0 + r1.
    # idle = i1 + i2 + expired i0 + matched h0 = 4; demand = 3 shared + 3 busy = 6;
    # eligible = 1 starting + 4 idle + 3 busy = 8; stale = x0 + t0 + t1 + t2 + z0 + z1 = 6;
    # dedicated = d0..d4 = 5; physical = 20.
    assert p.census == Census(
        starting=1, idle=4, held=1, assigned=1, running=2, stale=6, single_use=5,
        expired_idle=1, demand=6, eligible=8, physical=20,
    )  # fmt: skip
    # floorDeficit = max(0, 2 - 15) = 0, demandDeficit = 0, ceiling full: no shared create.
    assert p.create == 0
    # Dedicated supply: d0 (single-use, idle), d1 (img, starting); busy or held ones are not.
    # room = 0 at the ceiling: nothing dedicated can be created either.
    assert p.create_dedicated == []
    # deficit_left = 0 + (3 - 1) + (1 - 1) = 2 > 0 at the ceiling: blocked, holds are broken:
    # erin's h1 (tenure 5 + 60 <= 150, alice is waiting so h0 is spared).
    assert p.blocked_at_ceiling
    # Nothing created, so scale-down too: idle_cap = min(0, 20 - (20 - 4)) = 0,
    # retain = max(0, 2 - (1 + 3), 6 - (1 + 3)) = 2, remove = min(4 - 2, 1 expired, 18) = 1.
    # Drain: one pod retiring (x0) uses the whole budget of 1: no stale pod retires.
    assert p.retire == [Retired("h1", HB), Retired("i0", SD)]
    assert p.stable_until == 200.0  # i1's keep-alive runs out first
    assert p.pool == "cpu"


def test_cpu_dedicated_creates_fill_the_budget_in_key_order() -> None:
    spec = CPU.model_copy(update={"min_count": 0, "max_count": 30})
    queued = q("x", 3, single_use=True) + q("y", 3, image="img") + q("bob", 1)
    pods = [p for p in every_cpu_class() if p.name not in ("x0",)]
    p = plan(spec, pods, [], queued, 150.0, headroom_units=4)
    # busy 3, demand = 1 + 3 = 4, eligible = 1 + 3 (i0, i1, i2) + 3 = 7: no shared deficit.
    assert (p.census.demand, p.census.eligible, p.census.idle, p.census.held) == (4, 7, 3, 2)
    assert p.create == 0
    # budget = min(room 11, step 10, head 4) - 0 = 4; keys in str order: (False, img) first,
    # 3 - 1 starting = 2, then (True, None): 3 - 1 idle = 2.
    assert p.create_dedicated == [
        DedicatedCreate(False, "img"), DedicatedCreate(False, "img"),
        DedicatedCreate(True, None), DedicatedCreate(True, None),
    ]  # fmt: skip
    assert not p.blocked_at_ceiling
    # Dedicated creates mean no scale-down this pass; with no pod retiring, the oldest stale
    # pod drains (z1 before z0: creation order).
    assert p.retire == [Retired("z1", ST)]


def test_cpu_headroom_caps_dedicated_creates_and_blocks() -> None:
    spec = CPU.model_copy(update={"min_count": 0, "max_count": 30})
    pods = [pod("d0", S.IDLE, single_use=True)]
    p = plan(spec, pods, [], q("x", 4, single_use=True), 0.0, headroom_units=2)
    assert p.create_dedicated == [DedicatedCreate(True, None)] * 2  # 3 wanted, head of 2
    p = plan(spec, pods, [], q("x", 4, single_use=True), 0.0, headroom_units=3)
    assert p.create_dedicated == [DedicatedCreate(True, None)] * 3
    assert not p.blocked_at_ceiling  # all three made
    p = plan(spec, pods, [], q("x", 1, single_use=True), 0.0)
    assert p.create_dedicated == [] and not p.blocked_at_ceiling  # the idle one serves it


def test_cpu_shared_add_and_blocked_at_the_budget() -> None:
    spec = cpu_pool(min_count=1, max_count=10, step=3, cpus_per_pod=2.0)
    busy = [pod("r0", S.RUNNING), pod("r1", S.RUNNING)]
    # demand 5 + 2 busy = 7, eligible 2 -> deficit 5; headroom 5 cores = 2 pods of 2 cores.
    p = plan(spec, busy, [], q("bob", 5), 0.0, headroom_units=5)
    assert (p.create, p.census.demand, p.census.eligible) == (2, 7, 2)
    assert p.blocked_at_ceiling  # 3 still wanted and no headroom left
    p = plan(spec, busy, [], q("bob", 2), 0.0, headroom_units=5)
    assert (p.create, p.blocked_at_ceiling) == (2, False)  # exactly what was wanted
    p = plan(spec, busy, [], q("bob", 5), 0.0, headroom_units=1)
    assert (p.create, p.blocked_at_ceiling) == (0, True)  # one core fits no 2-core pod
    p = plan(spec, busy, [], q("bob", 5), 0.0)
    assert (p.create, p.blocked_at_ceiling) == (3, False)  # the step, room left
    full = busy + [pod(f"r{i}", S.RUNNING) for i in range(2, 9)]
    p = plan(spec, full, [], q("bob", 2), 0.0)
    assert (p.create, p.blocked_at_ceiling) == (1, True)  # one under the ceiling
    p = plan(spec, full, [], [], 0.0)
    assert (p.create, p.blocked_at_ceiling, p.retire) == (0, False, [])


def test_cpu_scale_down_retains_for_demand_and_removes_oldest_first() -> None:
    spec = cpu_pool(min_count=0, max_count=10, max_idle_count=0, idle_timeout=100.0)
    expired = [pod(f"e{i}", S.IDLE, idle_since=10.0 * i) for i in (2, 0, 1)]
    others = [pod("s0", S.STARTING), pod("r0", S.RUNNING)]
    # demand = 2 + 1 busy = 3, eligible = 1 + 3 + 1 = 5; retain = max(0, 0 - 1, 3 - 2) = 1;
    # remove = min(3 - 1, 3 expired, 5 - 0) = 2, the longest idle first.
    p = plan(spec, expired + others, [], q("bob", 2), 200.0)
    assert p.retire == [Retired("e0", SD), Retired("e1", SD)]
    # No demand: everything expired goes.
    p = plan(spec, expired + others, [], [], 200.0)
    assert p.retire == [Retired("e0", SD), Retired("e1", SD), Retired("e2", SD)]
    # Exactly at the keep-alive (idle_since + 100 == now) a pod has expired.
    p = plan(spec, [pod("e", S.IDLE, idle_since=100.0)], [], [], 200.0)
    assert p.retire == [Retired("e", SD)] and p.census.expired_idle == 1


def test_cpu_scale_down_keeps_the_floor_and_the_idle_cap() -> None:
    spec = cpu_pool(min_count=3, max_count=10, max_idle_count=0, idle_timeout=100.0)
    pods = [pod(f"e{i}", S.IDLE, idle_since=float(i)) for i in range(3)] + [
        pod("r0", S.RUNNING),
        pod("h0", S.HELD, owner="alice", hold_until=500.0),
    ]
    # retain = max(0, 3 - (1 held + 1 busy) = 1, 0 + 1 - 1 = 0) = 1: two of three go.
    p = plan(spec, pods, [], [], 200.0)
    assert p.retire == [Retired("e0", SD), Retired("e1", SD)]
    capped = spec.model_copy(update={"min_count": 0, "max_idle_count": 2})
    # idle_cap = min(2, 10 - (5 - 3)) = 2: one goes.
    p = plan(capped, pods, [], [], 200.0)
    assert p.retire == [Retired("e0", SD)]
    tight = spec.model_copy(update={"min_count": 0, "max_idle_count": 5, "max_count": 6})
    # idle_cap = min(5, 6 - (5 - 3)) = 4 >= 3 idle: none goes.
    assert plan(tight, pods, [], [], 200.0).retire == []


def test_cpu_held_pods_count_per_owner() -> None:
    spec = cpu_pool(max_count=10, idle_timeout=100.0)
    pods = [
        pod("h0", S.HELD, owner="alice", hold_until=500.0),
        pod("h1", S.HELD, owner="alice", hold_until=500.0),
        pod("h2", S.HELD, owner="bob", hold_until=500.0),
    ]
    # alice holds 2 and waits with 3: 2 match; bob holds 1, waits with none.
    p = plan(spec, pods, [], q("alice", 3), 10.0)
    assert (p.census.idle, p.census.held, p.census.demand, p.create) == (2, 1, 3, 1)
    p = plan(spec, pods, [], q("alice", 1) + q("bob", 1), 10.0)
    assert (p.census.idle, p.census.held) == (2, 1)


def test_cpu_hold_breaking_timing_and_stable_until() -> None:
    spec = cpu_pool(max_count=2, idle_timeout=1000.0)
    pods = [
        pod("h0", S.HELD, owner="alice", created=0.0, idle_since=10.0, hold_until=900.0),
        pod("h1", S.HELD, owner="bob", created=30.0, idle_since=5.0, hold_until=900.0),
    ]
    p = plan(spec, pods, [], q("dave"), 60.0)
    # h0 ripe at exactly 0 + 60 = now; h1 ripe at 90, which bounds the plan's validity.
    assert p.blocked_at_ceiling and p.retire == [Retired("h0", HB)] and p.stable_until == 90.0
    p = plan(spec, pods, [], q("dave", 2), 100.0)
    assert p.retire == [Retired("h1", HB), Retired("h0", HB)]  # oldest hold (idle_since) first
    p = plan(spec, pods, [], q("dave") + q("bob"), 100.0)
    assert p.retire == [Retired("h0", HB)]  # bob waits: his hold is spared
    p = plan(spec, pods, [], q("dave"), 59.0)
    assert p.retire == [] and p.stable_until == 60.0


def test_cpu_stale_drain_budget() -> None:
    spec = cpu_pool(max_count=10)
    stale = [pod(f"z{i}", S.STALE, created=float(10 - i)) for i in range(4)]
    p = plan(spec, stale, [], [], 0.0, config=ScalerConfig(drain_budget=2))
    assert p.retire == [Retired("z3", ST), Retired("z2", ST)]  # the oldest two
    p = plan(spec, [*stale, pod("x", S.RETIRING)], [], [], 0.0, config=ScalerConfig(drain_budget=2))
    assert p.retire == [Retired("z3", ST)]  # one retiring already
    p = plan(spec, [*stale, pod("x", S.RETIRING)], [], [], 0.0, config=ScalerConfig(drain_budget=1))
    assert p.retire == []


# ------------------------------------------------------------------------------ GPU pools

GPU = gpu_pool(
    standbys_per_active=1,
    min_count=0,
    max_count=30,
    max_idle_count=30,
    idle_timeout=100.0,
    step=10,
)


def g(name: str, state: PodState, grp: str, **kw: object) -> Pod:
    role = PodRole.STANDBY if name.startswith("sb") else PodRole.ACTIVE
    return pod(name, state, pool="gpu", group=grp, role=role, **kw)  # type: ignore[arg-type]


def every_gpu_class() -> list[Pod]:
    return [
        g("a1", S.RUNNING, "G1"), g("sb1", S.IDLE, "G1"),  # running (standby not supply)
        g("a2", S.ASSIGNED, "G2"),  # assigned
        g("a3", S.IDLE, "G3", idle_since=0.0), g("sb3", S.IDLE, "G3", idle_since=5.0),  # expired
        g("a4", S.IDLE, "G4", idle_since=100.0),  # idle until 200
        g("a5", S.HELD, "G5", owner="alice", idle_since=120.0, created=2.0),  # held
        g("a6", S.STARTING, "G6"),  # starting
        g("a7", S.IDLE, "G7", template=0),  # stale template
        g("a8", S.RETIRING, "G8"),  # every member gone: stale
        g("a9", S.IDLE, "G9", single_use=True),  # dedicated, supply
        g("a10", S.RUNNING, "G10", single_use=True),  # dedicated, busy
        g("a11", S.RETIRING, "G11"), g("sb11", S.IDLE, "G11", idle_since=0.0),  # part gone: idle
        g("a12", S.HELD, "G12", owner="bob", idle_since=50.0, created=1.0),  # held (bob)
        g("a13", S.HELD, "G13", owner="bob", idle_since=60.0, created=1.0),  # held (bob)
        g("a14", S.STARTING, "G14", image="img"),  # dedicated, supply
        g("a15", S.IDLE, "G15", idle_since=0.0), g("sb15", S.STARTING, "G15"),  # idle
    ]  # fmt: skip


def test_gpu_census_of_every_class() -> None:
    pods = every_gpu_class()
    queued = q("bob", 3) + q("dave") + q("x", 2, single_use=True) + q("y", 2, image="img")
    p = plan(GPU, pods, groups_of(pods), queued, 150.0)
    # units: running G1, assigned G2, expired G3, idle G4 G11 G15, held G5 G12 G13, starting
    # G6, stale G7 G8, dedicated G9 G10 G14 -> 15 physical. bob's two holds match his jobs.
    # idle = 3 idle + 1 expired + 2 matched = 6; held = 3 - 2 = 1; busy 2;
    # demand = 4 shared + 2 = 6; eligible = 1 + 6 + 2 = 9.
    assert p.census == Census(
        starting=1, idle=6, held=1, assigned=1, running=1, stale=2, single_use=3,
        expired_idle=1, demand=6, eligible=9, physical=15,
    )  # fmt: skip
    assert p.create == 0
    # supply: G9 single-use idle, G14 img starting -> one more of each.
    assert p.create_dedicated == [DedicatedCreate(False, "img"), DedicatedCreate(True, None)]
    assert not p.blocked_at_ceiling and p.retire == []
    # Standbys: G2, G4, G5, G11 (its standby alone is live), G12, G13 miss one; G15's
    # starting standby fills its slot; stale, dedicated and starting groups get none.
    assert sorted(p.create_standbys) == ["G11", "G12", "G13", "G2", "G4", "G5"]
    assert p.stable_until == 200.0


def test_gpu_scale_down_retires_whole_expired_groups_oldest_first() -> None:
    spec = GPU.model_copy(update={"max_idle_count": 0, "standbys_per_active": 0})
    pods = [
        g("a1", S.IDLE, "G1", idle_since=30.0), g("sb1", S.IDLE, "G1", idle_since=10.0),
        g("a2", S.IDLE, "G2", idle_since=0.0),
        g("a3", S.IDLE, "G3", idle_since=20.0),
        g("a4", S.IDLE, "G4", idle_since=99.0),  # exactly at its keep-alive at 199
    ]  # fmt: skip
    # A group is as old as its most recently idle member: G2 (0), G3 (20), G1 (30), G4 (99).
    p = plan(spec, pods, groups_of(pods), q("bob", 1), 199.0)
    assert p.census.expired_idle == 4 and p.census.idle == 4
    assert [r.pod for r in p.retire] == ["a2", "a3", "a1", "sb1"]  # retain 1 for bob
    assert {r.reason for r in p.retire} == {SD}


def test_gpu_hold_breaking_and_held_owner_counts() -> None:
    spec = GPU.model_copy(update={"max_count": 3, "standbys_per_active": 0})
    pods = [
        g("a1", S.HELD, "G1", owner="alice", idle_since=10.0, created=0.0),
        g("a2", S.HELD, "G2", owner="alice", idle_since=20.0, created=0.0),
        g("a3", S.HELD, "G3", owner="bob", idle_since=5.0, created=0.0),
    ]
    p = plan(spec, pods, groups_of(pods), q("alice", 3), 100.0)
    # alice's two holds match; a third job of hers is blocked at the ceiling: bob's breaks.
    assert (p.census.idle, p.census.held, p.census.demand) == (2, 1, 3)
    assert p.blocked_at_ceiling and p.retire == [Retired("a3", HB)]
    p = plan(spec, pods, groups_of(pods), q("dave", 2), 100.0)
    assert [r.pod for r in p.retire] == ["a3", "a1"]  # oldest holds first


def test_gpu_census_without_stale_dedicated_or_expired_units() -> None:
    spec = GPU.model_copy(update={"standbys_per_active": 0})
    pods = [g("a1", S.RUNNING, "G1"), g("a2", S.IDLE, "G2", idle_since=100.0)]
    empty = Group("G0", "gpu")  # a group whose pods are all gone from the list: skipped
    p = plan(spec, pods, [empty, *groups_of(pods)], [], 150.0)
    assert p.census == Census(
        idle=1, running=1, demand=1, eligible=2, physical=2,
    )  # stale, single_use, expired_idle, held, starting, assigned all zero
    assert p.retire == [] and p.create == 0


def test_gpu_dedicated_supply_counts_every_ready_or_starting_group_of_its_kind() -> None:
    spec = GPU.model_copy(update={"standbys_per_active": 0})
    pods = [
        g("a1", S.IDLE, "G1", single_use=True),
        g("a2", S.IDLE, "G2", single_use=True),
        g("a3", S.STARTING, "G3", single_use=True),
        g("a4", S.RUNNING, "G4", single_use=True),  # busy: not supply
        g("a5", S.RUNNING, "G5", single_use=True),
        g("a6", S.ASSIGNED, "G6", single_use=True),
    ]
    p = plan(spec, pods, groups_of(pods), q("x", 5, single_use=True), 0.0)
    assert p.census.single_use == 6
    assert p.create_dedicated == [DedicatedCreate(True, None)] * 2  # 5 wanted - 3 supply


def test_gpu_standbys_within_the_step_skipping_retired_and_empty_groups() -> None:
    spec = GPU.model_copy(update={"step": 2, "max_idle_count": 0})
    pods = [
        g("a0", S.IDLE, "G0", idle_since=0.0),  # expired: retired this pass, no standby
        g("a1", S.RUNNING, "G1"),
        g("a2", S.RUNNING, "G2"),
        g("a3", S.RUNNING, "G3"),
    ]
    p = plan(spec, pods, groups_of(pods), [], 150.0)
    assert p.retire == [Retired("a0", SD)]
    assert p.create_standbys == ["G1", "G2"]  # the step bounds the standbys of one pass


def test_gpu_stale_drain_counts_retiring_pods_itself() -> None:
    spec = GPU.model_copy(update={"standbys_per_active": 0})
    pods = [
        g("a1", S.STALE, "G1", created=5.0),
        g("a2", S.STALE, "G2", created=1.0),
        g("a3", S.STALE, "G3", created=3.0),
        g("a4", S.RUNNING, "G4"),
    ]
    p = plan(spec, pods, groups_of(pods), [], 0.0, config=ScalerConfig(drain_budget=2))
    assert p.retire == [Retired("a2", ST), Retired("a3", ST)]
    retiring = [*pods, g("a5", S.RETIRING, "G5")]
    p = plan(spec, retiring, groups_of(retiring), [], 0.0, config=ScalerConfig(drain_budget=2))
    assert p.retire == [Retired("a2", ST)]
    two = [*retiring, g("a6", S.RETIRING, "G6")]
    p = plan(spec, two, groups_of(two), [], 0.0, config=ScalerConfig(drain_budget=2))
    assert p.retire == []
    three = [*two, g("a7", S.RETIRING, "G7")]  # more retiring than the budget: none more
    p = plan(spec, three, groups_of(three), [], 0.0, config=ScalerConfig(drain_budget=2))
    assert p.retire == []
    p = plan(spec, [g("a4", S.RUNNING, "G4")], groups_of([g("a4", S.RUNNING, "G4")]), [], 0.0)
    assert p.retire == []  # nothing stale: nothing to drain


def test_cpu_counts_of_each_class_accumulate() -> None:
    spec = cpu_pool(max_count=40, idle_timeout=100.0)
    pods = [
        pod("a0", S.ASSIGNED), pod("a1", S.ASSIGNED), pod("a2", S.ASSIGNED),
        pod("d0", S.RUNNING, single_use=True), pod("d1", S.RUNNING, single_use=True),
        pod("d2", S.RUNNING, image="i"),
        pod("e0", S.IDLE, single_use=True), pod("e1", S.IDLE, single_use=True),
        pod("m0", S.IDLE, image="img"), pod("m1", S.IDLE, image="img"),
        pod("s0", S.STARTING, image="img"), pod("s1", S.STARTING, image="img"),
        pod("x0", S.RETIRING), pod("x1", S.RETIRING),
    ]  # fmt: skip
    queued = q("x", 3, single_use=True) + q("y", 5, image="img")
    p = plan(spec, pods, [], queued, 0.0)
    assert (p.census.assigned, p.census.single_use, p.census.stale) == (3, 9, 2)
    # supply: 2 single-use idle, 4 img (2 idle + 2 starting) -> 1 + 1 to create
    assert p.create_dedicated == [DedicatedCreate(False, "img"), DedicatedCreate(True, None)]
    p = plan(spec, [*pods, pod("z", S.STALE)], [], [], 0.0, config=ScalerConfig(drain_budget=2))
    assert p.retire == []  # two retiring use the whole budget


def test_cpu_blocked_at_the_ceiling_or_the_budget_exactly() -> None:
    spec = cpu_pool(max_count=10, step=1)
    busy = [pod(f"r{i}", S.RUNNING) for i in range(8)]
    # room 2, step 1: add 1, room - add = 1 left: not blocked (the budget is ample).
    p = plan(spec, busy, [], q("bob", 3), 0.0, headroom_units=100)
    assert (p.create, p.blocked_at_ceiling) == (1, False)
    # headroom 2: add 1, head - add = 1: not blocked either.
    p = plan(spec, busy, [], q("bob", 3), 0.0, headroom_units=2)
    assert (p.create, p.blocked_at_ceiling) == (1, False)
    nine = [*busy, pod("r8", S.RUNNING)]
    # room 1 with a large budget: add 1 = room, so the rest is blocked at the ceiling.
    p = plan(spec, nine, [], q("bob", 3), 0.0, headroom_units=100)
    assert (p.create, p.blocked_at_ceiling) == (1, True)
    ten = [*nine, pod("r9", S.RUNNING)]
    p = plan(spec, ten, [], q("bob", 3), 0.0, headroom_units=100)
    assert (p.create, p.blocked_at_ceiling) == (0, True)


def test_cpu_blocked_by_dedicated_demand_at_the_ceiling() -> None:
    spec = cpu_pool(max_count=3)
    supply = [pod("e0", S.IDLE, single_use=True), pod("e1", S.IDLE, single_use=True)]
    full = [*supply, pod("r0", S.RUNNING)]
    # Dedicated demand fully served by supply: not blocked.
    p = plan(spec, full, [], q("x", 2, single_use=True), 0.0, headroom_units=100)
    assert (p.create_dedicated, p.blocked_at_ceiling) == ([], False)
    # One job of a kind with no supply, at the ceiling: blocked.
    p = plan(spec, full, [], q("y", 1, image="img"), 0.0, headroom_units=100)
    assert (p.create_dedicated, p.blocked_at_ceiling) == ([], True)
    # A shared deficit at the ceiling with dedicated demand served: still blocked.
    p = plan(spec, full, [], q("x", 2, single_use=True) + q("bob", 2), 0.0, headroom_units=100)
    assert p.blocked_at_ceiling


def test_cpu_shared_and_dedicated_creates_share_the_step() -> None:
    spec = cpu_pool(max_count=20, step=3)
    queued = q("bob", 1) + q("x", 5, single_use=True)
    p = plan(spec, [], [], queued, 0.0, headroom_units=100)
    # add 1 shared; the dedicated budget is min(20, 3, 100) - 1 = 2.
    assert p.create == 1 and p.create_dedicated == [DedicatedCreate(True, None)] * 2
    assert p.blocked_at_ceiling is False


def test_cpu_scale_down_over_a_lowered_ceiling_and_with_stale_pods() -> None:
    # The operator lowered the ceiling to 4 under a pool of 6: idle_cap = min(5, 4 - 2) = 2.
    spec = cpu_pool(min_count=0, max_count=4, max_idle_count=5, idle_timeout=10.0)
    pods = [pod(f"e{i}", S.IDLE, idle_since=float(i)) for i in range(4)] + [
        pod("r0", S.RUNNING),
        pod("r1", S.RUNNING),
    ]
    p = plan(spec, pods, [], [], 100.0)
    assert p.retire == [Retired("e0", SD), Retired("e1", SD)]
    # The floor: retain = max(0, 3 - (1 + 1), 0) = 1, and a retiring pod makes the pool's
    # physical count larger than its idle, held and busy pods: two of three go.
    floor = cpu_pool(min_count=3, max_count=10, idle_timeout=10.0)
    pods = [pod(f"e{i}", S.IDLE, idle_since=float(i)) for i in range(3)] + [
        pod("r0", S.RUNNING),
        pod("h0", S.HELD, owner="alice", hold_until=500.0),
        pod("x0", S.RETIRING),
    ]
    p = plan(floor, pods, [], [], 100.0)
    assert [r.pod for r in p.retire if r.reason is SD] == ["e0", "e1"]

"""One test per placement, hold, gate and limit rule of the tracker, with worked numbers."""

from __future__ import annotations

import pytest

from firepool.control.records import (
    ClaimRequest,
    PodSnapshot,
    Retired,
    RetireReason,
    Wait,
    WaitReason,
)
from firepool.control.tracker import Tracker
from firepool.model import (
    AcquisitionPath,
    AcquisitionReason,
    ConflictError,
    InvalidTransitionError,
    LeaseTagMode,
    NotFoundError,
    PodRole,
    PodState,
    UnknownPoolError,
)
from firepool.testing.control import (
    cpu_pool,
    gpu_pool,
    lease,
    ready_pods,
    ready_standby,
    request,
    run_job,
)

W = AcquisitionPath.WARM
R = AcquisitionReason


def paths(got: object) -> list[tuple[str, AcquisitionPath, AcquisitionReason]]:
    return [(p.name, p.path, p.reason) for p in lease(got).pods]  # type: ignore[arg-type]


def test_placement_prefers_own_session_then_recycled_then_fresh() -> None:
    t = Tracker([cpu_pool(idle_timeout=100)])
    _a, b, c = ready_pods(t, "cpu", 3)
    run_job(t, request("j1", tag="s1"), 1.0)  # takes c (newest never-used), holds it
    assert t.get(c).state is PodState.HELD
    assert paths(t.claim(request("j2", tag="s1"), 3.0)) == [(c, W, R.SAME_SESSION)]
    t.release("j2", 4.0)
    # A new tag: the caller's own pod once (recycled), before any never-used pod.
    assert paths(t.claim(request("j3", tag="s2"), 5.0)) == [
        (c, AcquisitionPath.RECYCLED, R.NEW_SESSION)
    ]
    # While c is busy, the next job of the new session takes a never-used pod.
    assert paths(t.claim(request("j4", tag="s2"), 5.0)) == [(b, W, R.NO_OWN_POD)]
    released = t.release("j3", 6.0)
    assert released.retired == [Retired(c, RetireReason.SESSION_BOUNDARY)]
    assert t.get(c).state is PodState.RETIRING
    t.check_invariants()


def test_queue_switch_recycles_then_retires() -> None:
    t = Tracker([cpu_pool(idle_timeout=100)])
    (pod,) = ready_pods(t, "cpu", 1)
    run_job(t, request("j1", queue="q1"), 1.0)
    assert paths(t.claim(request("j2", queue="q2"), 3.0)) == [
        (pod, AcquisitionPath.RECYCLED, R.QUEUE_SWITCH)
    ]
    assert t.release("j2", 4.0).retired == [Retired(pod, RetireReason.SESSION_BOUNDARY)]


def test_used_pod_never_serves_another_caller_even_when_it_is_the_only_idle_pod() -> None:
    t = Tracker([cpu_pool(idle_timeout=100)])
    (pod,) = ready_pods(t, "cpu", 1)
    run_job(t, request("a1", caller="alice"), 1.0)
    assert t.claim(request("b1", caller="bob"), 3.0) == Wait("b1", WaitReason.NO_CAPACITY)
    assert t.get(pod).state is PodState.HELD and t.get(pod).owner == "alice"


def test_hold_inherits_keep_alive_and_expiry_retires() -> None:
    t = Tracker([cpu_pool(idle_timeout=30)])
    (pod,) = ready_pods(t, "cpu", 1)
    run_job(t, request("j1"), 1.0)  # released at 2.0: held until 32.0
    assert t.get(pod).hold_until == 32.0
    assert t.expire_holds(31.9) == []
    # A claim after the hold ran out does not get the pod, even before the tick retires it.
    assert isinstance(t.claim(request("j2"), 32.0), Wait)
    assert t.expire_holds(32.0) == [Retired(pod, RetireReason.HOLD_EXPIRED)]
    assert t.get(pod).state is PodState.RETIRING


def test_caller_hold_seconds_overrides_keep_alive_and_zero_retires_at_release() -> None:
    t = Tracker([cpu_pool(idle_timeout=30, caller_hold_seconds=5)])
    ready_pods(t, "cpu", 1)
    got = run_job(t, request("j1"), 1.0)
    assert t.get(got.pods[0].name).hold_until == 7.0
    t2 = Tracker([cpu_pool(idle_timeout=30, caller_hold_seconds=0)])
    ready_pods(t2, "cpu", 1)
    got = lease(t2.claim(request("j1"), 1.0))
    assert t2.release("j1", 2.0).retired == [Retired(got.pods[0].name, RetireReason.HOLD_EXPIRED)]


def test_unclean_reset_retires_and_the_pod_is_never_reused() -> None:
    t = Tracker([cpu_pool(idle_timeout=100)])
    (pod,) = ready_pods(t, "cpu", 1)
    got = lease(t.claim(request("j1"), 1.0))
    t.mark_running(pod)
    result = t.release("j1", 2.0, unclean=[pod])
    assert result.retired == [Retired(pod, RetireReason.UNCLEAN_RESET)]
    assert got.pods[0].name == pod
    assert isinstance(t.claim(request("j2"), 3.0), Wait)


def test_tag_as_hint_keeps_the_pod_but_queue_boundary_still_retires() -> None:
    t = Tracker([cpu_pool(idle_timeout=100, lease_tag_mode=LeaseTagMode.HINT)])
    (pod,) = ready_pods(t, "cpu", 1)
    run_job(t, request("j1", tag="s1"), 1.0)
    assert paths(t.claim(request("j2", tag="s2"), 3.0)) == [(pod, W, R.TAG_HINT)]
    assert t.release("j2", 4.0).held == [(pod, 104.0)]
    assert paths(t.claim(request("j3", tag="s2", queue="other"), 5.0)) == [
        (pod, AcquisitionPath.RECYCLED, R.QUEUE_SWITCH)
    ]


def test_hint_mode_prefers_the_same_tag() -> None:
    t = Tracker([cpu_pool(idle_timeout=100, lease_tag_mode=LeaseTagMode.HINT)])
    ready_pods(t, "cpu", 2)
    p1 = lease(t.claim(request("j1", tag="s1"), 1.0)).pods[0].name
    p2 = lease(t.claim(request("j2", tag="s2"), 1.0)).pods[0].name
    t.release("j1", 2.0)
    t.release("j2", 3.0)  # p2 is the newer hold, yet s1 goes back to p1
    assert paths(t.claim(request("j3", tag="s1"), 20.0)) == [(p1, W, R.SAME_SESSION)]
    assert paths(t.claim(request("j4", tag="s2"), 20.0)) == [(p2, W, R.SAME_SESSION)]


def test_pod_created_after_the_job_queued_is_a_new_pod() -> None:
    t = Tracker([cpu_pool()])
    ready_pods(t, "cpu", 1, now=0.0)
    assert paths(t.claim(request("j1", queued_at=5.0), 5.0))[0][1:] == (W, R.NO_OWN_POD)
    ready_pods(t, "cpu", 1, now=7.0, prefix="late")
    got = paths(t.claim(request("j2", queued_at=6.0), 30.0))
    assert got[0][1:] == (AcquisitionPath.NEW, R.NO_WARM_CAPACITY)


def test_multi_pod_claim_is_all_or_nothing() -> None:
    t = Tracker([cpu_pool()])
    ready_pods(t, "cpu", 2)
    assert t.claim(request("big", pods=3), 1.0) == Wait("big", WaitReason.NO_CAPACITY)
    assert all(t.get(n).state is PodState.IDLE for n in ("cpu-0", "cpu-1"))
    ready_pods(t, "cpu", 1)
    got = lease(t.claim(request("big", pods=3), 2.0))
    assert sorted(p.name for p in got.pods) == ["cpu-0", "cpu-1", "cpu-2"]
    t.check_invariants()


def test_multi_pod_claim_takes_distinct_physical_gpus() -> None:
    t = Tracker([gpu_pool(standbys_per_active=3)])
    (g0,) = ready_pods(t, "gpu", 1)
    ready_standby(t, "gpu", g0, "sb-0")
    # One active and its standby share a card: a 2-pod job cannot use both.
    assert isinstance(t.claim(request("pair", pool="gpu", pods=2), 1.0), Wait)
    (g1,) = ready_pods(t, "gpu", 1)
    got = lease(t.claim(request("pair", pool="gpu", pods=2), 2.0))
    assert {t.get(p.name).group for p in got.pods} == {g0, g1}


def test_per_caller_pod_and_gpu_limits() -> None:
    t = Tracker([cpu_pool(max_pods_per_caller=2), gpu_pool(max_gpus_per_caller=1)])
    ready_pods(t, "cpu", 3)
    ready_pods(t, "gpu", 2)
    lease(t.claim(request("a", pods=2), 1.0))
    assert t.claim(request("b"), 1.0) == Wait("b", WaitReason.CALLER_POD_LIMIT)
    lease(t.claim(request("c", caller="bob"), 1.0))  # the limit is per caller
    lease(t.claim(request("g1", pool="gpu"), 1.0))
    assert t.claim(request("g2", pool="gpu"), 1.0) == Wait("g2", WaitReason.CALLER_GPU_LIMIT)
    t.release("g1", 2.0)
    lease(t.claim(request("g3", pool="gpu"), 3.0))


def test_global_gpu_limit_spans_pools() -> None:
    t = Tracker([gpu_pool("a"), gpu_pool("b", accelerators_per_pod=2)], max_gpus_per_caller=3)
    ready_pods(t, "a", 2)
    ready_pods(t, "b", 1)
    lease(t.claim(request("j1", pool="b"), 1.0))  # 2 GPUs
    lease(t.claim(request("j2", pool="a"), 1.0))  # 3 GPUs
    assert t.claim(request("j3", pool="a"), 1.0) == Wait("j3", WaitReason.CALLER_GPU_LIMIT)
    assert t.caller_gpus("alice") == 3


def test_standby_waits_for_the_gate_and_is_promoted_when_the_previous_job_is_gone() -> None:
    t = Tracker([gpu_pool(standbys_per_active=2, idle_timeout=100)])
    (g0,) = ready_pods(t, "gpu", 1)
    sb = ready_standby(t, "gpu", g0, "sb")
    lease(t.claim(request("a1", pool="gpu", caller="alice"), 1.0))
    t.mark_running(g0)
    got = lease(t.claim(request("b1", pool="gpu", caller="bob"), 2.0))
    assert paths(got) == [(sb, AcquisitionPath.STANDBY, R.NO_IDLE_POD)]
    assert not got.launchable
    with pytest.raises(InvalidTransitionError):
        t.mark_running(sb)
    result = t.release("a1", 3.0)
    assert result.held == [(g0, 103.0)]
    assert [(p.job, p.pod, p.job_launchable) for p in result.promoted] == [("b1", sb, True)]
    t.mark_running(sb)
    assert t.get(sb).role is PodRole.ACTIVE and t.get(g0).role is PodRole.STANDBY
    # Alice's held pod shares the busy card: her next job must not wait behind bob's.
    assert isinstance(t.claim(request("a2", pool="gpu", caller="alice"), 4.0), Wait)
    t.check_invariants()


def test_standby_on_a_free_card_is_preferred_and_promoted_at_once() -> None:
    t = Tracker([gpu_pool(standbys_per_active=1, idle_timeout=100)])
    g0, g1 = ready_pods(t, "gpu", 2)
    s0 = ready_standby(t, "gpu", g0, "s0")
    s1 = ready_standby(t, "gpu", g1, "s1")
    run_job(t, request("a1", pool="gpu", caller="alice"), 1.0)  # g1 ran, now held
    lease(t.claim(request("c1", pool="gpu", caller="carol"), 2.0))  # takes g0
    t.mark_running(g0)
    got = lease(t.claim(request("b1", pool="gpu", caller="bob"), 3.0))
    assert paths(got) == [(s1, AcquisitionPath.STANDBY, R.NO_IDLE_POD)]
    assert got.launchable
    assert s0 != s1


def test_unclean_gpu_pod_keeps_the_gate_until_deleted() -> None:
    t = Tracker([gpu_pool(standbys_per_active=1)])
    (g0,) = ready_pods(t, "gpu", 1)
    sb = ready_standby(t, "gpu", g0, "sb")
    lease(t.claim(request("a1", pool="gpu", caller="alice"), 1.0))
    t.mark_running(g0)
    lease(t.claim(request("b1", pool="gpu", caller="bob"), 2.0))
    result = t.release("a1", 3.0, unclean=[g0])
    assert result.promoted == []  # its processes may still hold the card
    freed, promoted = t.pod_deleted(g0)
    assert freed is None  # the group lives on in the standby
    assert [(p.job, p.pod) for p in promoted] == [("b1", sb)]
    t.mark_running(sb)


def test_unclaim_restores_pods_and_returns_the_gate() -> None:
    t = Tracker([gpu_pool(standbys_per_active=1, idle_timeout=100)])
    (g0,) = ready_pods(t, "gpu", 1)
    sb = ready_standby(t, "gpu", g0, "sb")
    run_job(t, request("a1", pool="gpu", caller="alice"), 1.0)
    lease(t.claim(request("a2", pool="gpu", caller="alice"), 3.0))  # warm: takes the gate
    lease(t.claim(request("b1", pool="gpu", caller="bob"), 3.0))  # standby, gated
    promoted = t.unclaim("a2")  # the durable commit failed
    assert [(p.job, p.pod) for p in promoted] == [("b1", sb)]
    assert t.get(g0).state is PodState.HELD and t.get(g0).owner == "alice"
    t.check_invariants()


def test_single_use_jobs_take_only_pods_made_for_them_and_retire_them() -> None:
    t = Tracker([cpu_pool()])
    ready_pods(t, "cpu", 1)
    assert isinstance(t.claim(request("s1", single_use=True), 1.0), Wait)
    t.add_pod("su", "cpu", 1.0, single_use=True)
    t.pod_ready("su", 2.0)
    # A regular job never takes a single-use pod.
    got = lease(t.claim(request("r1"), 2.0))
    assert got.pods[0].name != "su"
    assert paths(t.claim(request("s1", single_use=True), 3.0)) == [
        ("su", AcquisitionPath.NEW, R.SINGLE_USE)
    ]
    assert t.release("s1", 4.0).retired == [Retired("su", RetireReason.SINGLE_USE)]


def test_custom_images_pinned_reuse_within_session_mutable_retire() -> None:
    t = Tracker([cpu_pool(idle_timeout=100)])
    pinned = "repo/img@sha256:" + "a" * 64
    t.add_pod("p", "cpu", 0.0, image=pinned)
    t.pod_ready("p", 0.0)
    req = request("j1", image=pinned, image_pinned=True)
    assert paths(t.claim(req, 1.0)) == [("p", AcquisitionPath.CUSTOM_IMAGE, R.CUSTOM_IMAGE)]
    t.release("j1", 2.0)
    again = request("j2", image=pinned, image_pinned=True)
    assert paths(t.claim(again, 3.0)) == [("p", AcquisitionPath.CUSTOM_IMAGE, R.SAME_SESSION)]
    t.release("j2", 4.0)
    # Never across a session: another tag waits for a new pod of its own.
    assert isinstance(t.claim(request("j3", image=pinned, image_pinned=True, tag="x"), 5.0), Wait)
    t.add_pod("m", "cpu", 5.0, image="repo/img:latest")
    t.pod_ready("m", 5.0)
    lease(t.claim(request("j4", image="repo/img:latest"), 6.0))
    assert t.release("j4", 7.0).retired == [Retired("m", RetireReason.CUSTOM_IMAGE)]


def test_new_template_marks_idle_pods_stale_and_busy_pods_stale_after_their_job() -> None:
    spec = cpu_pool(idle_timeout=100)
    t = Tracker([spec])
    a, b = ready_pods(t, "cpu", 2)
    lease(t.claim(request("j1"), 1.0))  # takes b
    stale = t.set_pool(spec.model_copy(update={"template_version": 2}))
    assert stale == [a]
    assert t.get(a).state is PodState.STALE
    # Not retired at release: it drains through the scaler, within the drain budget.
    released = t.release("j1", 2.0)
    assert released.retired == [] and released.held == []
    assert t.get(b).state is PodState.STALE
    assert t.get(b).retire_after is RetireReason.STALE_TEMPLATE
    assert isinstance(t.claim(request("j2"), 3.0), Wait)  # an old pod serves nothing new
    t.check_invariants()


def test_a_reclaimed_job_s_pods_retire_at_release_whatever_their_hold() -> None:
    t = Tracker([cpu_pool(idle_timeout=100, caller_hold_seconds=60)])
    ready_pods(t, "cpu", 1)
    (pod,) = [p.name for p in lease(t.claim(request("j1"), 1.0)).pods]
    assert t.retire_after_job("j1", RetireReason.RECLAIMED) == (pod,)
    assert t.release("j1", 2.0).retired == [Retired(pod, RetireReason.RECLAIMED)]


def test_restore_rebuilds_holds_and_leases_after_a_restart() -> None:
    t = Tracker([cpu_pool(idle_timeout=100)])
    t.restore(
        PodSnapshot(
            "p0",
            "cpu",
            PodState.HELD,
            0.0,
            owner="alice",
            queue="default",
            tag="s",
            used=True,
            hold_until=50.0,
        )
    )
    t.restore(PodSnapshot("p1", "cpu", PodState.RUNNING, 0.0, owner="bob", job="jb", used=True))
    assert paths(t.claim(request("j1", tag="s"), 10.0)) == [("p0", W, R.SAME_SESSION)]
    assert t.job_pods("jb") == ("p1",)
    assert t.release("jb", 11.0).held == [("p1", 111.0)]
    t.check_invariants()


def test_typed_errors_for_bad_calls() -> None:
    t = Tracker([cpu_pool()])
    ready_pods(t, "cpu", 1)
    with pytest.raises(UnknownPoolError) as err:
        t.claim(ClaimRequest("j", "alice", "nope"), 1.0)
    assert err.value.field == "pool"
    lease(t.claim(request("j"), 1.0))
    with pytest.raises(ConflictError):
        t.claim(request("j"), 1.0)
    with pytest.raises(NotFoundError):
        t.release("unknown", 1.0)
    with pytest.raises(InvalidTransitionError):
        t.pod_ready("cpu-0", 1.0)  # assigned -> idle through readiness is not a transition
    with pytest.raises(InvalidTransitionError):
        t.pod_deleted("cpu-0")  # leased
    with pytest.raises(ConflictError):
        t.add_pod("cpu-0", "cpu", 1.0)
    with pytest.raises(InvalidTransitionError):
        t.add_pod("x", "cpu", 1.0, role=PodRole.STANDBY)


def test_retire_refuses_a_pod_that_a_claim_took_meanwhile() -> None:
    t = Tracker([cpu_pool()])
    (pod,) = ready_pods(t, "cpu", 1)
    lease(t.claim(request("j"), 1.0))
    assert t.retire(pod, RetireReason.SCALE_DOWN) is False
    assert t.get(pod).state is PodState.ASSIGNED


def test_standby_must_join_an_existing_group_of_its_pool() -> None:
    t = Tracker([gpu_pool(standbys_per_active=1)])
    with pytest.raises(InvalidTransitionError):
        t.add_pod("sb", "gpu", 0.0, role=PodRole.STANDBY, group="missing")
    with pytest.raises(InvalidTransitionError):
        t.add_pod("a", "gpu", 0.0)  # a GPU pod names its group
    (g0,) = ready_pods(t, "gpu", 1)
    with pytest.raises(ConflictError):
        t.add_pod("a2", "gpu", 0.0, group=g0)  # one active per card


def test_a_session_waits_for_its_own_pod_while_it_is_reset_after_an_early_verdict() -> None:
    """`ending`: the job's verdict is out and its pod is being reset. The same session's next
    job waits for that pod, though a never-used pod is idle; another session or caller takes
    the idle pod at once; after the release the waiting job gets its own pod back, warm."""
    t = Tracker([cpu_pool(idle_timeout=100)])
    fresh, mine = ready_pods(t, "cpu", 2)
    assert lease(t.claim(request("j1", tag="s"), 1.0)).pods[0].name == mine
    t.mark_running(mine)
    t.ending("j1")
    assert t.claim(request("j2", tag="s"), 2.0) == Wait("j2", WaitReason.OWN_POD_RESETTING)
    gang = request("g", tag="s", pods=2)  # the general path waits too
    assert t.claim(gang, 2.0) == Wait("g", WaitReason.OWN_POD_RESETTING)
    assert paths(t.claim(request("b1", caller="bob", tag="s"), 2.0)) == [
        (fresh, W, R.NO_OWN_POD)
    ]
    t.release("j1", 3.0)
    assert paths(t.claim(request("j2", tag="s"), 3.0)) == [(mine, W, R.SAME_SESSION)]


def test_no_wait_for_a_pod_that_will_not_come_back_held() -> None:
    """A pod the release retires (no hold, a single-use pod, an unclean reset) is not waited
    for: the session's next job takes another pod as it always did."""
    t = Tracker([cpu_pool(idle_timeout=100, caller_hold_seconds=0)])
    fresh, _mine = ready_pods(t, "cpu", 2)
    lease(t.claim(request("j1", tag="s"), 1.0))
    t.ending("j1")
    assert paths(t.claim(request("j2", tag="s"), 2.0)) == [(fresh, W, R.NO_OWN_POD)]
    t2 = Tracker([cpu_pool(idle_timeout=100)])
    other, pod = ready_pods(t2, "cpu", 2)
    lease(t2.claim(request("j1", tag="s"), 1.0))
    t2.ending("j1")
    assert isinstance(t2.claim(request("j2", tag="s"), 2.0), Wait)
    t2.release("j1", 3.0, unclean=[pod])  # it is deleted instead: the wait ends
    assert paths(t2.claim(request("j2", tag="s"), 3.0)) == [(other, W, R.NO_OWN_POD)]


def test_the_session_waits_only_for_as_many_pods_as_are_being_reset() -> None:
    """Two pods of the session: one held already, one resetting. The first claim takes the
    held pod, the second waits for the resetting one."""
    t = Tracker([cpu_pool(idle_timeout=100)])
    _fresh, a, b = ready_pods(t, "cpu", 3)
    for job in ("j1", "j2"):
        lease(t.claim(request(job, tag="s"), 1.0))
    t.release("j1", 2.0)
    t.ending("j2")
    held = lease(t.claim(request("j3", tag="s"), 2.0)).pods[0].name
    assert held in (a, b)
    assert t.claim(request("j4", tag="s"), 2.0) == Wait("j4", WaitReason.OWN_POD_RESETTING)

"""Age-keyed gang reservations: the oldest gang that found no capacity keeps the pods that free
up, jobs ahead of it are never held back, and the reservation lapses after its bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firepool.control.dispatch import QueuedJob, dispatch_pass
from firepool.control.records import Lease, WaitReason
from firepool.control.reservations import GangReservations, ReservationRules
from firepool.control.tracker import Tracker
from firepool.model import ConfigError
from firepool.testing.control import cpu_pool, lease, ready_pods, request


def busy_pool(pods: int) -> tuple[Tracker, list[str]]:
    """A pool whose every pod runs a one-pod job (`busy-i`); pods retire after their job."""
    t = Tracker([cpu_pool(caller_hold_seconds=0.0)])
    ready_pods(t, "cpu", pods)
    for i in range(pods):
        got = lease(t.claim(request(f"busy-{i}", caller=f"c{i}"), 0.0))
        t.mark_running(got.pods[0].name)
    return t, [f"busy-{i}" for i in range(pods)]


def free_one(t: Tracker, job: str, now: float) -> None:
    """A job ends: its pod retires (no hold) and the scaler's replacement comes up fresh."""
    t.release(job, now)
    ready_pods(t, "cpu", 1, now, prefix=f"new-{job}")


def queue(gang_at: float, smalls: list[float], pods: int = 3) -> list[QueuedJob]:
    q = [QueuedJob(request("gang", caller="g", pods=pods), submitted_at=gang_at)]
    q += [QueuedJob(request(f"s{i}", caller=f"s{i}"), submitted_at=at)
          for i, at in enumerate(smalls)]
    return q


def placed(result: object) -> list[str]:
    return [x.job for x in result.leases]  # type: ignore[attr-defined]


def test_without_reservations_younger_small_jobs_take_every_freed_pod() -> None:
    t, busy = busy_pool(4)
    q = queue(1.0, [2.0, 3.0, 4.0])
    for k, job in enumerate(busy[:3]):
        free_one(t, job, 10.0 + k)
        got = placed(dispatch_pass(t, q, 10.0 + k))
        assert got == [f"s{k}"]  # the gang is skipped each time: it never sees 3 free at once
        q = [j for j in q if j.request.job not in got]


def test_the_gang_keeps_freed_pods_and_claims_them_all() -> None:
    t, busy = busy_pool(4)
    res = GangReservations(ReservationRules(hold_s=100.0))
    q = queue(1.0, [0.5, 2.0, 3.0])  # s0 is older than the gang
    free_one(t, busy[0], 10.0)
    result = dispatch_pass(t, q, 10.0, res)
    assert placed(result) == ["s0"]  # ahead of the gang: never held back
    r = res.holder("cpu")
    assert r is not None and r.job == "gang"
    q = [j for j in q if j.request.job != "s0"]
    for k, job in enumerate(busy[1:3]):
        free_one(t, job, 11.0 + k)
        result = dispatch_pass(t, q, 11.0 + k, res)
        assert placed(result) == []
        reasons = {w.job: w.reason for w in result.waiting}
        assert reasons == {"gang": WaitReason.NO_CAPACITY, "s1": WaitReason.GANG_RESERVED,
                           "s2": WaitReason.GANG_RESERVED}
    free_one(t, busy[3], 13.0)
    result = dispatch_pass(t, q, 13.0, res)
    assert placed(result) == ["gang"]
    assert res.holder("cpu") is None
    # It kept 1 pod for 1 s, then 2 for 1 s: 3 pod-seconds.
    assert res.held_pod_seconds == pytest.approx(3.0)


def test_surplus_fresh_pods_still_go_to_jobs_behind_the_gang() -> None:
    t, busy = busy_pool(2)
    res = GangReservations(ReservationRules())
    q = queue(1.0, [2.0, 3.0], pods=2)
    free_one(t, busy[0], 5.0)
    dispatch_pass(t, q, 5.0, res)
    ready_pods(t, "cpu", 2, 6.0, prefix="extra")  # the pool grew: 3 fresh, the gang needs 2
    result = dispatch_pass(t, q, 6.0, res)
    assert sorted(placed(result)) == ["gang", "s0"]


def test_a_reservation_lapses_after_its_bound_and_rests() -> None:
    t, busy = busy_pool(3)
    res = GangReservations(ReservationRules(hold_s=50.0, rest_s=30.0))
    q = queue(1.0, [2.0])
    free_one(t, busy[0], 10.0)
    dispatch_pass(t, q, 10.0, res)
    assert res.holder("cpu") is not None
    assert placed(dispatch_pass(t, q, 59.0, res)) == []  # s0 still held back
    result = dispatch_pass(t, q, 60.0, res)  # the bound: the pod is everyone's again
    assert placed(result) == ["s0"] and res.lapsed == 1
    assert res.holder("cpu") is None  # resting: the gang does not reserve again at once
    q = [j for j in q if j.request.job != "s0"] + [
        QueuedJob(request("s9", caller="s9"), submitted_at=70.0)]
    free_one(t, busy[1], 80.0)
    assert placed(dispatch_pass(t, q, 80.0, res)) == ["s9"]
    free_one(t, busy[2], 95.0)
    dispatch_pass(t, q, 95.0, res)  # 90 s: the rest is over, it reserves again
    r = res.holder("cpu")
    assert r is not None and r.since == 95.0


def test_the_oldest_gang_reserves_and_a_cancelled_gang_frees_the_pool() -> None:
    t, busy = busy_pool(3)
    res = GangReservations(ReservationRules())
    q = [QueuedJob(request("young", caller="y", pods=2), submitted_at=5.0),
         QueuedJob(request("old", caller="o", pods=2), submitted_at=1.0)]
    free_one(t, busy[0], 10.0)
    dispatch_pass(t, q, 10.0, res)
    r = res.holder("cpu")
    assert r is not None and r.job == "old"
    assert res.close("old") and res.holder("cpu") is None


def test_one_pod_jobs_never_reserve() -> None:
    t, _busy = busy_pool(1)
    res = GangReservations(ReservationRules())
    dispatch_pass(t, [QueuedJob(request("solo"), submitted_at=1.0)], 2.0, res)
    assert res.holder("cpu") is None


@pytest.mark.parametrize("rules", [dict(hold_s=0.0), dict(rest_s=-1.0), dict(min_pods=1),
                                   dict(hold_s=float("nan"))])
def test_bad_rules_are_refused(rules: dict[str, float]) -> None:
    with pytest.raises(ConfigError) as exc:
        ReservationRules(**rules)  # type: ignore[arg-type]
    assert exc.value.field == next(iter(rules))


@settings(max_examples=60, deadline=None)
@given(
    pods=st.integers(2, 6),
    gang=st.integers(2, 6),
    steps=st.lists(st.tuples(st.booleans(), st.integers(0, 2)), min_size=1, max_size=25),
)
def test_held_pods_never_shrink_below_the_gang_and_it_claims_once_it_can(
    pods: int, gang: int, steps: list[tuple[bool, int]]
) -> None:
    """Events: a busy job ends (True) or not, and some small jobs arrive. While the gang holds
    the pool, a pass never leaves fewer fresh pods than min(before, n); once n are fresh the
    gang is placed on that pass; nobody ahead of it is held back."""
    gang = min(gang, pods)
    t, busy = busy_pool(pods)
    res = GangReservations(ReservationRules(hold_s=1e9))
    q = [QueuedJob(request("gang", caller="g", pods=gang), submitted_at=1.0),
         QueuedJob(request("early", caller="e"), submitted_at=0.5)]
    now, n = 2.0, 0
    running = list(busy)
    for ends, arrivals in steps:
        now += 1.0
        if ends and running:
            free_one(t, running.pop(0), now)
        for _ in range(arrivals):
            q.append(QueuedJob(request(f"s{n}", caller=f"s{n}"), submitted_at=now))
            n += 1
        before = t.fresh_count("cpu")
        holding = res.holder("cpu") is not None
        result = dispatch_pass(t, q, now, res)
        got = placed(result)
        for w in result.waiting:
            if w.reason is WaitReason.GANG_RESERVED:
                assert w.job != "early"
        waiting = "gang" in [j.request.job for j in q]
        if waiting and holding and before >= gang:
            assert "gang" in got
        if waiting and holding and "gang" not in got:
            ahead = 1 if "early" in got else 0  # a job ahead of the gang may take a pod
            assert t.fresh_count("cpu") + ahead >= min(before, gang)
        for x in result.leases:
            assert isinstance(x, Lease)
            if x.job != "gang":
                running.append(x.job)
                t.mark_running(x.pods[0].name)
            else:
                for p in x.pods:
                    t.mark_running(p.name)
        q = [j for j in q if j.request.job not in got]

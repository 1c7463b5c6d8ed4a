"""Borrowed capacity through the broker core: a grant lets the scaler create at once; a
reclaim gives back one unit per unit asked, idle pods first (unheld before held), then the
youngest job, whose attempt is retried as `Reclaimed` whatever its retries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from firepool.control.actions import StopAttempt, StopMode
from firepool.control.borrowing import borrowed_limit, plan_giveback
from firepool.control.core import CoreConfig
from firepool.control.records import RetireReason
from firepool.control.tracker import Tracker
from firepool.model import JobErrorClass, JobState, PodState
from firepool.testing.control import cpu_pool, gpu_pool, lease, ready_pods, request
from firepool.testing.core_driver import StepDriver

POOL = gpu_pool("gpu", min_count=0, max_idle_count=4, max_count=4, idle_timeout=1e6, step=4,
                caller_hold_seconds=1e6)


def test_the_plan_takes_unheld_idle_then_held_then_the_youngest_job() -> None:
    t = Tracker([POOL])
    ready_pods(t, "gpu", 4)
    (a,) = [p.name for p in lease(t.claim(request("old", pool="gpu"), 1.0)).pods]
    (b,) = [p.name for p in lease(t.claim(request("young", pool="gpu"), 2.0)).pods]
    (c,) = [p.name for p in lease(t.claim(request("held", pool="gpu", caller="bob"), 3.0)).pods]
    t.release("held", 4.0)  # c is held for bob
    (d,) = [p.name for p in t.pool_pods("gpu") if p.name not in (a, b, c)]
    started = {"old": 1.0, "young": 2.0}
    plan = plan_giveback(1, [POOL], {"gpu": t.pool_pods("gpu")}, started)
    assert (plan.retire, plan.preempt) == ((d,), ())
    plan = plan_giveback(2, [POOL], {"gpu": t.pool_pods("gpu")}, started)
    assert (plan.retire, plan.preempt) == ((d, c), ())
    plan = plan_giveback(3, [POOL], {"gpu": t.pool_pods("gpu")}, started)
    assert (plan.retire, plan.preempt, plan.freed) == ((d, c), ("young",), 3)
    # What is already leaving is not given back twice.
    plan = plan_giveback(3, [POOL], {"gpu": t.pool_pods("gpu")}, started, ["young"])
    assert (plan.retire, plan.preempt) == ((d, c), ())
    t.retire(d, RetireReason.RECLAIMED)
    plan = plan_giveback(1, [POOL], {"gpu": t.pool_pods("gpu")}, started)
    assert (plan.retire, plan.preempt, plan.short) == ((), (), 0)


def test_a_grant_creates_pods_and_a_reclaim_gives_one_card_back_per_card() -> None:
    floor = POOL.model_copy(update={"min_count": 2})
    driver = StepDriver.of([floor], budgets={"H200": 0}, config=CoreConfig(elastic=None))
    core = driver.core
    driver.settle()
    assert not core.tracker.pool_pods("gpu")  # no budget, no pod
    driver.act(core.capacity_changed("H200", 2, driver.now))
    assert len(driver.starting) == 2  # the grant reaches the scaler at once
    driver.settle()
    old = driver.submit("alice", "gpu", max_retries=0)
    driver.tick()
    young = driver.submit("bob", "gpu", max_retries=0)
    assert core.ledger.used("H200") == 2
    # The owner takes one card back: no idle pod is left, so the youngest job goes.
    actions = core.capacity_changed("H200", 1, driver.now)
    assert [a for a in actions if isinstance(a, StopAttempt)] == [
        StopAttempt(young, StopMode.RECLAIM)
    ]
    driver.act(actions)
    assert core.capacity_changed("H200", 1, driver.now) == []  # asked once, given once
    driver.finish(driver.launched.index(young))
    assert driver.verdicts[young] == [JobErrorClass.RECLAIMED]  # retried though max_retries=0
    (leaving,) = driver.deleting
    assert core.tracker.get(leaving).retire_after is RetireReason.RECLAIMED
    assert core.tracker.get(leaving).state is PodState.RETIRING
    driver.deleted()
    assert core.ledger.used("H200") == 1
    driver.finish()  # the old job ends; its pod stays for its owner
    driver.act(core.capacity_changed("H200", 2, driver.now))
    driver.settle()
    assert driver.finished == {old: JobState.SUCCEEDED, young: JobState.SUCCEEDED}
    assert core.reclaimed == 1


def test_a_reclaim_takes_an_idle_pod_before_any_job() -> None:
    driver = StepDriver.of([POOL.model_copy(update={"min_count": 2})], budgets={"H200": 2},
                           config=CoreConfig(elastic=None))
    core = driver.core
    driver.settle()
    job = driver.submit("alice", "gpu")
    (busy,) = core.tracker.job_pods(job)
    actions = core.capacity_changed("H200", 1, driver.now)
    assert not [a for a in actions if isinstance(a, StopAttempt)]
    driver.act(actions)
    assert len(driver.deleting) == 1 and driver.deleting[0] != busy
    driver.settle()
    assert driver.verdicts[job] == [None]


@settings(max_examples=60, deadline=None)
@given(
    # Submissions and pods outnumber endings, so readings often meet busy pods only.
    moves=st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 1, 1, 2, 3, 4, 4]), st.integers(0, 7)),
                   min_size=5, max_size=100),
    gpu=st.booleans(),
)
def test_readings_in_any_order_fail_no_job_and_end_within_the_limit(
    moves: list[tuple[int, int]], gpu: bool
) -> None:
    """Jobs allow no retries, so a reclaim that counted as a failure would fail one."""
    pool = (gpu_pool if gpu else cpu_pool)(
        "p", min_count=1, max_idle_count=2, max_count=6, idle_timeout=1e6, step=2)
    resource = pool.budget_resource
    driver = StepDriver.of([pool], budgets={resource: 1},
                           config=CoreConfig(elastic=None, check_skips=True))
    core = driver.core
    limit = 1
    for move, arg in moves:
        driver.tick()
        if move == 0:
            driver.submit(f"caller-{arg % 3}", "p", max_retries=0)
        elif move == 1:
            driver.ready(arg)
        elif move == 2:
            driver.deleted(arg)
        elif move == 3:
            driver.finish(arg)
        else:
            limit = arg % 6
            driver.act(core.capacity_changed(resource, limit, driver.now))
        assert core.units_given == core.units_asked  # one unit per unit: 1-pod jobs
        core.tracker.check_invariants()
    final = max(limit, 1)
    driver.settle(poll=lambda: core.capacity_changed(resource, final, driver.now))
    assert all(state is JobState.SUCCEEDED for state in driver.finished.values())
    assert set(driver.finished) == set(driver.tickets)
    assert core.ledger.used(resource) <= final


def test_a_reading_adds_to_the_own_budget_and_never_limits_an_unlimited_resource() -> None:
    assert borrowed_limit(2, 3) == 5
    assert borrowed_limit(0, 0) == 0
    assert borrowed_limit(None, 4) is None


def test_a_reclaim_never_uses_up_the_job_s_retries() -> None:
    driver = StepDriver.of([POOL.model_copy(update={"min_count": 1})], budgets={"H200": 1},
                           config=CoreConfig(elastic=None))
    core = driver.core
    driver.settle()
    job = driver.submit("alice", "gpu", max_retries=1)
    driver.act(core.capacity_changed("H200", 0, driver.now))  # reclaimed
    driver.finish()
    driver.deleted()
    driver.act(core.capacity_changed("H200", 1, driver.now))
    for _ in range(3):  # its pod comes back and the retry launches
        driver.tick()
        driver.ready()
    driver.finish(exit_code=3)  # a real failure: its one retry
    assert driver.verdicts[job] == [JobErrorClass.RECLAIMED, JobErrorClass.NON_ZERO_EXIT]
    assert job not in driver.finished
    driver.settle()  # the next attempt exits 0
    assert driver.finished[job] is JobState.SUCCEEDED
    assert driver.tickets[job].retries == 2


def test_reclaims_count_from_the_stored_ticket_so_a_restart_changes_no_retry_decision() -> None:
    """A job reclaimed once, then (after a broker restart) failing for real: the new core
    knows the reclaim only from the ticket the store gives it, and still allows the retry."""
    pool = POOL.model_copy(update={"min_count": 1})
    before = StepDriver.of([pool], budgets={"H200": 1}, config=CoreConfig(elastic=None))
    before.settle()
    job = before.submit("alice", "gpu", max_retries=1)
    before.act(before.core.capacity_changed("H200", 0, before.now))
    before.finish()
    stored = before.tickets[job]  # what the store holds after the Reclaimed requeue
    assert (stored.retries, stored.reclaims, stored.failures) == (1, 1, 0)

    after = StepDriver.of([pool], budgets={"H200": 1}, config=CoreConfig(elastic=None))
    after.settle()
    after.tickets[job] = stored
    after.act(after.core.submit(stored, after.now))
    for _ in range(3):
        after.tick()
        after.ready()
    after.finish(exit_code=3)  # the first real failure uses the one retry, it ends nothing
    assert after.verdicts[job] == [JobErrorClass.NON_ZERO_EXIT]
    assert job not in after.finished
    assert (after.tickets[job].retries, after.tickets[job].failures) == (2, 1)
    after.finish(exit_code=3)  # the second one is over the limit
    after.settle()
    assert after.finished[job] is JobState.FAILED


def test_a_reading_of_borrowable_capacity_raises_the_own_budget_and_a_later_one_lowers_it() -> None:
    driver = StepDriver.of([POOL], budgets={"H200": 2}, config=CoreConfig(elastic=None))
    core = driver.core
    driver.act(core.borrowable_read({"H200": 3}, driver.now))
    assert core.ledger.limit("H200") == 5  # its own 2 plus the 3 it may borrow
    driver.act(core.borrowable_read({"H200": 1}, driver.now))
    assert core.ledger.limit("H200") == 3  # from its own budget, not from the last limit
    driver.act(core.borrowable_read({}, driver.now))  # the reading no longer names it
    assert core.ledger.limit("H200") == 2
    driver.act(core.borrowable_read({"CPU": 4}, driver.now))  # a resource not limited here
    assert core.ledger.limit("CPU") is None

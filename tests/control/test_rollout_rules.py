"""Template rollout through the broker core: which edits start one, and the drain rules
(never above the ceiling, never more than `drain_budget` old pods retiring, old pods serve
nothing new, busy ones finish their job, every job succeeds)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firepool.control.core import CoreConfig
from firepool.control.records import RetireReason
from firepool.control.rollout import applied_spec
from firepool.control.scaler import ScalerConfig
from firepool.model import ConfigError, JobState, PodState, UnknownPoolError
from firepool.testing.control import cpu_pool, gpu_pool
from firepool.testing.core_driver import StepDriver


def test_a_changed_template_field_raises_the_version_and_knobs_alone_do_not() -> None:
    pool = cpu_pool(min_count=1, template_version=3)
    assert applied_spec(pool, pool.model_copy(update={"image": "b:2"})).template_version == 4
    assert applied_spec(pool, pool.model_copy(update={"min_count": 2})).template_version == 3
    explicit = pool.model_copy(update={"template_version": 7})
    assert applied_spec(pool, explicit).template_version == 7


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"template_version": 2}, "template_version"),
        ({"accelerators_per_pod": 2}, "accelerators_per_pod"),
    ],
)
def test_edits_a_live_pool_cannot_take_are_refused_naming_the_field(
    update: dict[str, int], field: str
) -> None:
    pool = gpu_pool(template_version=3)
    with pytest.raises(ConfigError) as err:
        applied_spec(pool, pool.model_copy(update=update))
    assert err.value.field == field


def test_an_unknown_pool_is_refused_and_changes_nothing() -> None:
    driver = StepDriver.of([cpu_pool()])
    with pytest.raises(UnknownPoolError):
        driver.core.set_pool(cpu_pool("other"), 0.0)
    assert list(driver.core.specs) == ["cpu"]


def test_idle_old_pods_drain_first_and_busy_ones_after_their_job() -> None:
    pool = cpu_pool(min_count=3, max_idle_count=3, max_count=3, idle_timeout=1e6, step=3)
    driver = StepDriver.of([pool])
    driver.settle()
    job = driver.submit("alice", "cpu")
    busy = driver.core.tracker.job_pods(job)
    driver.act(driver.core.set_pool(pool.model_copy(update={"image": "new"}), driver.now))
    progress = driver.core.rollout("cpu")
    assert (progress.stale_busy, progress.stale_idle + progress.retiring) == (1, 2)
    # The first pod retiring is an idle one; the busy one keeps running its job.
    assert driver.deleting and driver.deleting[0] not in busy
    assert driver.core.tracker.get(busy[0]).state is PodState.RUNNING
    driver.settle()
    assert driver.finished == {job: JobState.SUCCEEDED}
    progress = driver.core.rollout("cpu")
    assert progress.done and progress.current == 3


@settings(max_examples=60, deadline=None)
@given(
    moves=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 7)), min_size=5, max_size=120),
    ceiling=st.integers(1, 6),
    drain=st.integers(1, 3),
    gpu=st.booleans(),
)
def test_a_rollout_never_exceeds_the_cap_or_the_drain_budget_and_fails_no_job(
    moves: list[tuple[int, int]], ceiling: int, drain: int, gpu: bool
) -> None:
    make = gpu_pool if gpu else cpu_pool
    pool = make("p", min_count=ceiling // 2, max_idle_count=ceiling, max_count=ceiling,
                idle_timeout=1e6, step=2)
    driver = StepDriver.of(
        [pool], config=CoreConfig(scaler=ScalerConfig(drain_budget=drain), elastic=None,
                             check_skips=True),
    )
    core = driver.core
    version = 1
    for move, arg in moves:
        driver.tick()
        if move == 0:
            driver.submit(f"caller-{arg % 3}", "p")
        elif move == 1:
            driver.ready(arg)
        elif move == 2:
            driver.deleted(arg)
        elif move == 3:
            driver.finish(arg)
        elif move == 4:
            version += 1
            driver.act(core.set_pool(pool.model_copy(update={"template_version": version}),
                                     driver.now))
        else:
            driver.act(core.reconcile("p", driver.now))
        pods = core.tracker.pool_pods("p")
        groups = {p.group or p.name for p in pods}
        assert len(groups) <= ceiling
        draining = [p for p in pods if p.state is PodState.RETIRING
                    and p.retire_after is RetireReason.STALE_TEMPLATE]
        assert len(draining) <= drain
        assert all(pod == pool for pod, pool in driver.claimed)  # old pods take no new job
        core.tracker.check_invariants()
    driver.settle()
    assert all(state is JobState.SUCCEEDED for state in driver.finished.values())
    assert set(driver.finished) == set(driver.tickets)
    progress = core.rollout("p")
    assert progress.done, progress
    assert all(p.template == core.specs["p"].template_version
               for p in core.tracker.pool_pods("p"))

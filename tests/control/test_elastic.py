"""The elastic lifecycle: rounds, resizes as stop-then-start, measured times, failures."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firepool.control.elastic import (
    ElasticJobSpec,
    ElasticLifecycle,
    Phase,
    StartAttempt,
    StopAttempt,
    Unplaceable,
)
from firepool.model import InvalidTransitionError, RequestValidationError
from firepool.scheduling import (
    Configuration,
    OakPolicy,
    RoundInput,
    RoundResult,
    ThroughputObservation,
    make_policy,
)

ONE, TWO, FOUR = (Configuration("gpu", n, 1) for n in (1, 2, 4))


def linear(spec: ElasticJobSpec, observed: Sequence[ThroughputObservation],
           fraction: float) -> tuple[float, ...]:
    """Goodput = replicas (perfect scaling), 1.0 on one GPU."""
    return tuple(float(c.replicas) for c in spec.configurations)


class Fixed:
    """A policy returning a scripted assignment."""

    name = "fixed"

    def __init__(self, assignments: dict[str, Configuration | None]) -> None:
        self.assignments = assignments
        self.seen: list[RoundInput] = []

    def decide(self, round_input: RoundInput) -> RoundResult:
        self.seen.append(round_input)
        return RoundResult("fixed", {j.job_id: self.assignments.get(j.job_id)
                                     for j in round_input.jobs})


def spec(job_id: str, at: float = 0.0, cfgs: tuple[Configuration, ...] = (ONE, TWO, FOUR)
         ) -> ElasticJobSpec:
    return ElasticJobSpec(job_id, "cifar10", cfgs, submitted_at=at)


def test_rounds_run_on_the_timer_and_on_events() -> None:
    life = ElasticLifecycle({"gpu": 4}, linear, round_s=60.0)
    assert life.round_due(0.0) is None
    assert life.round_due(60.0) == "timer"
    life.submit(spec("a"), 10.0)
    assert life.round_due(10.0) == "arrival"
    out = life.run_round(10.0, Fixed({"a": TWO}))
    assert out.trigger == "arrival"
    assert out.decisions == (StartAttempt("a", 1, TWO),)
    assert life.round_due(11.0) is None and life.next_round_at == 70.0
    life.progress("a", 1, 20.0)
    assert life.attempt_exited("a", 1, 30.0, "completed") == []
    assert life.round_due(30.0) == "completion"


def test_resize_is_graceful_stop_then_start_with_new_world_size() -> None:
    life = ElasticLifecycle({"gpu": 4}, linear)
    life.submit(spec("a"), 0.0)
    life.run_round(0.0, Fixed({"a": TWO}))
    life.progress("a", 1, 30.0)
    out = life.run_round(60.0, Fixed({"a": FOUR}))
    assert out.decisions == (StopAttempt("a", 1, "resize", FOUR),)
    assert life.times("a", 60.0).phase is Phase.STOPPING
    assert life.held() == {"gpu": 2}  # still held while checkpointing
    started = life.attempt_exited("a", 1, 75.0, "checkpointed")
    assert started == [StartAttempt("a", 2, FOUR)]
    assert started[0].world_size == 4
    t = life.times("a", 75.0)
    assert t.restarts == 1 and t.attempt == 2


def test_measured_times() -> None:
    life = ElasticLifecycle({"gpu": 4}, linear)
    life.submit(spec("a"), 0.0)  # waits 10 s for its first round
    life.run_round(10.0, Fixed({"a": TWO}))  # first start 10..25: queueing, not overhead
    life.progress("a", 1, 25.0)
    life.run_round(85.0, Fixed({"a": FOUR}))  # 60 s of progress, then checkpoint 85..95
    life.attempt_exited("a", 1, 95.0, "checkpointed")  # restore again 95..100
    life.progress("a", 2, 100.0)
    t = life.times("a", 160.0)
    assert t.t_progress == pytest.approx(60.0 + 60.0)
    assert t.t_ckpt == pytest.approx(10.0 + 5.0)
    assert t.t_queue == pytest.approx(10.0 + 15.0 + 5.0)
    r = life.round_input(160.0).jobs[0]
    assert (r.t_progress, r.t_ckpt, r.t_queue, r.current) == (120.0, 15.0, 30.0, FOUR)
    assert r.age_s == 160.0 and r.restarts == 1


def test_starts_wait_for_gpus_still_checkpointing() -> None:
    life = ElasticLifecycle({"gpu": 4}, linear)
    life.submit(spec("a"), 0.0)
    life.submit(spec("b"), 0.0)
    life.run_round(0.0, Fixed({"a": FOUR}))
    life.progress("a", 1, 5.0)
    out = life.run_round(60.0, Fixed({"a": TWO, "b": TWO}))
    assert out.decisions == (StopAttempt("a", 1, "resize", TWO),)  # b must wait for a's GPUs
    assert life.held() == {"gpu": 4}
    started = life.attempt_exited("a", 1, 70.0, "checkpointed")
    assert sorted(d.job_id for d in started) == ["a", "b"]
    assert life.held() == {"gpu": 4}


def test_failure_requeues_and_triggers_a_round() -> None:
    life = ElasticLifecycle({"gpu": 4}, linear)
    life.submit(spec("a"), 0.0)
    life.run_round(0.0, Fixed({"a": FOUR}))
    life.progress("a", 1, 5.0)
    assert life.attempt_exited("a", 1, 50.0, "failed") == []
    assert life.round_due(50.0) == "failure"
    t = life.times("a", 50.0)
    assert t.phase is Phase.WAITING and t.restarts == 1 and life.held() == {}
    with pytest.raises(InvalidTransitionError):
        life.attempt_exited("a", 1, 51.0, "failed")
    out = life.run_round(51.0, Fixed({"a": FOUR}))
    assert out.decisions == (StartAttempt("a", 2, FOUR),)


def test_unplaceable_job_is_reported_once() -> None:
    life = ElasticLifecycle({"gpu": 2}, linear)
    life.submit(spec("big", cfgs=(FOUR,)), 0.0)
    first = life.run_round(0.0, OakPolicy())
    assert first.decisions == (Unplaceable("big", first.result.infeasible["big"]),)
    assert life.run_round(60.0, OakPolicy()).decisions == ()


def test_time_never_goes_backwards_and_ids_are_unique() -> None:
    life = ElasticLifecycle({"gpu": 2}, linear)
    life.submit(spec("a"), 10.0)
    with pytest.raises(RequestValidationError):
        life.submit(spec("b"), 5.0)
    with pytest.raises(RequestValidationError):
        life.submit(spec("a"), 11.0)


# One step of a script: (a job arrives?, which live attempts fail (by position among the
# live attempts, sorted), do restoring attempts report progress?). Hypothesis draws the whole
# script, so a failing case shrinks to the fewest arrivals and failures that break it.
_STEP = st.tuples(st.booleans(), st.lists(st.booleans(), max_size=6), st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEP, min_size=1, max_size=12),
       st.sampled_from(["oak", "sia", "sia-reference", "lookahead", "drf"]))
def test_rounds_under_failures_keep_capacity_counts_and_time_accounting(
        script: list[tuple[bool, list[bool], bool]], policy_name: str) -> None:
    """Random arrivals, rounds, progress and failures chosen by hypothesis: GPUs held never
    exceed the capacity, every delivered failure is counted (and only those), a failure makes
    the next round due at once, a failed job holds nothing, and each job's measured times add
    up to its time in the system."""
    life = ElasticLifecycle({"gpu": 6}, linear)
    policy = make_policy(policy_name)
    live: dict[str, int] = {}
    submitted: dict[str, float] = {}
    delivered: dict[str, int] = {}
    now = 0.0

    def started(decisions: Sequence[object]) -> None:
        for d in decisions:
            if isinstance(d, StartAttempt):
                assert d.attempt == live.get(d.job_id, 0) + 1  # attempts count up by one
                live[d.job_id] = d.attempt

    for step, (arrive, fail_mask, report) in enumerate(script):
        if arrive:
            life.submit(spec(f"j{step}", now), now)
            submitted[f"j{step}"] = now
        if life.round_due(now) is not None:
            started(life.run_round(now, policy).decisions)
        assert sum(life.held().values()) <= 6
        later = now + 5.0
        for job_id, attempt in sorted(live.items()):
            t = life.times(job_id, later)
            if t.phase is Phase.RESTORING and report:
                life.progress(job_id, attempt, later)
            elif t.phase is Phase.STOPPING:
                started(life.attempt_exited(job_id, attempt, later, "checkpointed"))
        failing = [(j, a) for k, (j, a) in enumerate(life.running())
                   if k < len(fail_mask) and fail_mask[k]]
        for job_id, attempt in failing:
            started(life.attempt_exited(job_id, attempt, later, "failed"))
            delivered[job_id] = delivered.get(job_id, 0) + 1
            assert life.times(job_id).configuration is None or \
                life.times(job_id).attempt != attempt  # the failed attempt holds nothing
        if failing:
            assert life.round_due(later) == "failure"
        assert sum(life.held().values()) <= 6
        now += 60.0
    for job_id, at in submitted.items():
        t = life.times(job_id, now)
        assert t.failures == delivered.get(job_id, 0)
        assert t.restarts >= t.failures
        elapsed = now - at
        # waiting + restoring + running <= elapsed <= that + checkpoint/restore time
        assert t.t_progress + t.t_queue <= elapsed + 1e-6
        assert t.t_progress + t.t_queue + t.t_ckpt >= elapsed - 1e-6
    for j in life.round_input(now).jobs:  # what the policies see agrees with the counts
        assert j.failures == delivered.get(j.job_id, 0)
        assert 0.0 <= j.t_ckpt_failures <= j.t_ckpt + 1e-9
        assert j.restoring == (life.times(j.job_id).phase is Phase.RESTORING)


def test_withdraw_frees_gpus_only_after_the_live_attempt_exits() -> None:
    life = ElasticLifecycle({"gpu": 4}, linear)
    life.submit(spec("a"), 0.0)
    life.submit(spec("b"), 0.0)
    life.run_round(0.0, Fixed({"a": FOUR, "b": None}))
    assert life.withdraw("a", 10.0) == []  # still holds its GPUs until the exit
    assert life.held() == {"gpu": 4}
    life.run_round(20.0, Fixed({"b": FOUR}))
    assert life.times("b").phase is Phase.WAITING  # waits for a's GPUs
    started = life.attempt_exited("a", 1, 30.0, "failed")  # even a failure ends it
    assert life.times("a").phase is Phase.DONE
    assert started == [StartAttempt("b", 1, FOUR)]


def test_withdraw_of_a_waiting_job_is_done_at_once() -> None:
    life = ElasticLifecycle({"gpu": 4}, linear)
    life.submit(spec("a"), 0.0)
    life.run_round(0.0, Fixed({}))
    life.withdraw("a", 5.0)
    assert life.times("a").phase is Phase.DONE
    assert life.round_input(6.0).jobs == ()


def test_progress_reports_move_the_fraction_and_refuse_bad_numbers() -> None:
    seen: list[float] = []

    def source(s: ElasticJobSpec, observed: Sequence[ThroughputObservation],
               fraction: float) -> tuple[float, ...]:
        seen.append(fraction)
        return linear(s, observed, fraction)

    life = ElasticLifecycle({"gpu": 4}, source)
    life.submit(spec("a"), 0.0)
    life.run_round(0.0, Fixed({"a": TWO}))
    assert life.progress("a", 1, 1.0, samples_per_s=10.0, fraction=0.4)
    assert not life.progress("a", 7, 2.0)  # stale attempt: ignored
    with pytest.raises(RequestValidationError) as err:
        life.progress("a", 1, 3.0, samples_per_s=float("nan"))
    assert err.value.field == "samples_per_s"
    with pytest.raises(RequestValidationError) as err:
        life.progress("a", 1, 3.0, fraction=1.5)
    assert err.value.field == "fraction"
    life.round_input(4.0)
    assert seen[-1] == 0.4


def test_work_conserving_rounds_keep_a_job_the_policy_would_idle() -> None:
    for conserving, expected in ((False, (StopAttempt("a", 1, "preempt", None),)), (True, ())):
        life = ElasticLifecycle({"gpu": 4}, linear, work_conserving=conserving)
        life.submit(spec("a"), 0.0)
        life.run_round(0.0, Fixed({"a": TWO}))
        life.progress("a", 1, 10.0)
        assert life.run_round(60.0, Fixed({"a": None})).decisions == expected


def test_failures_are_counted_apart_from_resizes() -> None:
    life = ElasticLifecycle({"gpu": 4}, linear)
    life.submit(spec("a"), 0.0)
    life.run_round(0.0, Fixed({"a": TWO}))
    life.progress("a", 1, 5.0)
    life.run_round(60.0, Fixed({"a": FOUR}))
    life.attempt_exited("a", 1, 61.0, "checkpointed")  # resize: a restart, not a failure
    life.attempt_exited("a", 2, 70.0, "failed")
    t = life.times("a")
    assert (t.restarts, t.failures) == (2, 1)

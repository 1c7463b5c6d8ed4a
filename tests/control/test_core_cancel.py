"""A cancel that lands after an attempt ended and before its retry: the core turns the retry
into CANCELLED (`control/dispatch.no_retry_after_cancel`), whichever way the driver learns of
the cancel (its own `cancel` event, or the store refusing a verdict's write); and the pods the
attempt retired are deleted only once its verdict is stored."""

from __future__ import annotations

from firepool.control.actions import Action, DeletePod, RecordVerdict
from firepool.control.dispatch import AttemptEnd, Verdict, judge, no_retry_after_cancel
from firepool.model import JobErrorClass, JobState
from firepool.testing.control import cpu_pool
from firepool.testing.core_driver import StepDriver


def _launched(max_retries: int) -> tuple[StepDriver, str]:
    d = StepDriver.of([cpu_pool(min_count=2, max_count=2, idle_timeout=100)], {"cpu": 4})
    d.settle()
    job = d.submit("alice", "cpu", max_retries=max_retries)
    while d.starting:
        d.ready()
    assert d.launched == [job]
    return d, job


def _verdicts(actions: list[Action]) -> list[Verdict]:
    return [a.verdict for a in actions if isinstance(a, RecordVerdict)]


def test_a_retry_becomes_cancelled_with_its_exit_code_kept() -> None:
    retry = judge(AttemptEnd(exit_code=3), 0, 1)
    assert retry.retry
    cancelled = no_retry_after_cancel(judge(AttemptEnd(exit_code=3), 0, 1))
    assert (cancelled.state, cancelled.error_class, cancelled.exit_code) == (
        JobState.CANCELLED, JobErrorClass.CANCELLED, 3)
    final = no_retry_after_cancel(judge(AttemptEnd(exit_code=0), 0, 1))
    assert final.state is JobState.SUCCEEDED  # the attempt ended before the cancel
    assert no_retry_after_cancel(final) is final


def test_a_cancel_during_the_reset_of_a_retryable_failure_ends_the_job_cancelled() -> None:
    d, job = _launched(max_retries=1)
    assert d.core.judge_before_reset(job, AttemptEnd(exit_code=3), d.now) == []
    d.act(d.core.cancel(job, d.now, terminal=False))  # while its pods are reset
    released = d.core.attempt_over(job, AttemptEnd(exit_code=3), (), d.now)
    (verdict,) = _verdicts(released)
    assert (verdict.state, verdict.exit_code) == (JobState.CANCELLED, 3)


def test_without_a_cancel_the_same_failure_is_retried() -> None:
    d, job = _launched(max_retries=1)
    assert d.core.judge_before_reset(job, AttemptEnd(exit_code=3), d.now) == []
    (verdict,) = _verdicts(d.core.attempt_over(job, AttemptEnd(exit_code=3), (), d.now))
    assert verdict.retry


def test_a_refused_write_follows_the_stores_cancel_flag() -> None:
    d, _job = _launched(max_retries=1)
    retry = judge(AttemptEnd(exit_code=3), 0, 1)
    assert d.core.verdict_refused(retry, cancel_requested=False) is retry
    assert d.core.verdict_refused(retry, cancel_requested=True).state is JobState.CANCELLED


def test_an_unclean_pod_is_deleted_only_once_the_verdict_is_stored() -> None:
    d, job = _launched(max_retries=0)
    (pod,) = [p.name for p in d.core.tracker.pool_pods("cpu") if p.job == job]
    released = d.core.attempt_over(job, AttemptEnd(exit_code=0), (pod,), d.now)
    assert _verdicts(released) and not any(isinstance(a, DeletePod) for a in released)
    ticket = next(a.ticket for a in released if isinstance(a, RecordVerdict))
    later = d.core.verdict_recorded(ticket, JobState.SUCCEEDED, d.now)
    assert [a.pod for a in later if isinstance(a, DeletePod)] == [pod]


def test_a_verdict_given_up_lets_the_held_deletions_go() -> None:
    d, job = _launched(max_retries=0)
    (pod,) = [p.name for p in d.core.tracker.pool_pods("cpu") if p.job == job]
    released = d.core.attempt_over(job, AttemptEnd(exit_code=0), (pod,), d.now)
    assert not any(isinstance(a, DeletePod) for a in released)
    gone = d.core.verdict_unrecorded(job, d.now)
    assert [a.pod for a in gone if isinstance(a, DeletePod)] == [pod]
    assert d.core.verdict_unrecorded(job, d.now) == []  # once

"""An elastic attempt's end: resizes re-queue without counting as failures; only failures
count against max_retries; a clean exit on its own is the training's completion."""

from __future__ import annotations

from firepool.control.dispatch import AttemptEnd
from firepool.control.elastic_verdict import judge_elastic
from firepool.model import JobErrorClass, JobState


def test_a_requested_stop_that_exits_cleanly_is_a_checkpoint_not_a_failure() -> None:
    out = judge_elastic(AttemptEnd(exit_code=0), stop_requested=True, failures=9, max_retries=0)
    assert out.outcome == "checkpointed" and not out.failure
    assert out.verdict.state is JobState.QUEUED
    assert out.verdict.error_class is JobErrorClass.PREEMPTED


def test_a_clean_exit_on_its_own_completes_the_job() -> None:
    out = judge_elastic(AttemptEnd(exit_code=0), stop_requested=False, failures=0, max_retries=3)
    assert out.outcome == "completed" and out.verdict.state is JobState.SUCCEEDED


def test_failures_retry_until_max_retries_then_fail() -> None:
    killed = AttemptEnd(signal=9)
    again = judge_elastic(killed, stop_requested=False, failures=2, max_retries=3)
    assert again.outcome == "failed" and again.failure
    assert again.verdict.state is JobState.QUEUED
    assert again.verdict.error_class is JobErrorClass.KILLED
    final = judge_elastic(killed, stop_requested=False, failures=3, max_retries=3)
    assert final.verdict.state is JobState.FAILED


def test_a_stop_that_does_not_exit_cleanly_is_a_failure() -> None:
    out = judge_elastic(AttemptEnd(exit_code=1), stop_requested=True, failures=0, max_retries=1)
    assert out.failure and out.verdict.error_class is JobErrorClass.NON_ZERO_EXIT


def test_cancel_and_timeout_end_the_job() -> None:
    cancelled = judge_elastic(AttemptEnd(cancelled=True, signal=15), stop_requested=True,
                              failures=0, max_retries=5)
    assert cancelled.verdict.state is JobState.CANCELLED and not cancelled.failure
    late = judge_elastic(AttemptEnd(timed_out=True), stop_requested=False, failures=0,
                         max_retries=5)
    assert late.verdict.state is JobState.FAILED
    assert late.verdict.error_class is JobErrorClass.TIMEOUT

"""Dispatcher decisions: queue order, gangs that skip instead of block, attempt verdicts."""

from __future__ import annotations

import pytest

from firepool.control.dispatch import AttemptEnd, QueuedJob, dispatch_pass, judge
from firepool.control.tracker import Tracker
from firepool.model import JobErrorClass, JobState
from firepool.testing.control import cpu_pool, ready_pods, request


def test_priority_then_age_and_a_blocked_gang_does_not_block_smaller_jobs() -> None:
    t = Tracker([cpu_pool()])
    ready_pods(t, "cpu", 2)
    queued = [
        QueuedJob(request("old-small"), priority=0, submitted_at=1.0),
        QueuedJob(request("gang", pods=3), priority=5, submitted_at=2.0),
        QueuedJob(request("urgent"), priority=9, submitted_at=3.0),
        QueuedJob(request("new-small"), priority=0, submitted_at=4.0),
    ]
    result = dispatch_pass(t, queued, 5.0)
    assert [lease.job for lease in result.leases] == ["urgent", "old-small"]
    assert [w.job for w in result.waiting] == ["gang", "new-small"]
    assert t.job_pods("gang") == ()  # the waiting gang holds nothing


@pytest.mark.parametrize(
    ("end", "retries", "state", "error", "code"),
    [
        (AttemptEnd(exit_code=0), 0, JobState.SUCCEEDED, None, 0),
        (AttemptEnd(exit_code=3), 0, JobState.FAILED, JobErrorClass.NON_ZERO_EXIT, 3),
        (AttemptEnd(exit_code=3), 1, JobState.QUEUED, JobErrorClass.NON_ZERO_EXIT, 3),
        (AttemptEnd(exit_code=137, oom=True), 0, JobState.FAILED, JobErrorClass.OOM, 137),
        (AttemptEnd(signal=9), 0, JobState.FAILED, JobErrorClass.KILLED, None),
        (AttemptEnd(launch_failed=True), 0, JobState.FAILED, JobErrorClass.LAUNCH_FAILED, None),
        (AttemptEnd(pod_lost=True), 1, JobState.QUEUED, JobErrorClass.POD_LOST, None),
        (AttemptEnd(timed_out=True), 1, JobState.FAILED, JobErrorClass.TIMEOUT, None),
        (AttemptEnd(cancelled=True), 1, JobState.CANCELLED, JobErrorClass.CANCELLED, None),
        (
            AttemptEnd(dependency_failed=True, exit_code=1),
            0,
            JobState.FAILED,
            JobErrorClass.DEPENDENCY_INSTALL_FAILED,
            1,
        ),
    ],
)
def test_verdicts(
    end: AttemptEnd, retries: int, state: JobState, error: JobErrorClass | None, code: int | None
) -> None:
    # `retries` here is the number of retries still allowed after this attempt.
    verdict = judge(end, retries=0, max_retries=retries)
    assert (verdict.state, verdict.error_class, verdict.exit_code) == (state, error, code)
    assert verdict.retry == (state is JobState.QUEUED)

"""Dispatcher decisions at their edges: the message and exit code every verdict carries
(invariant 7), and a pass that claims at its own `now` (see docs/testing.md, "Mutation
testing"). Only the public functions are used."""

from __future__ import annotations

import dataclasses

import pytest

from firepool.control.dispatch import AttemptEnd, QueuedJob, dispatch_pass, judge
from firepool.control.tracker import Tracker
from firepool.model import AcquisitionPath, JobErrorClass, JobState
from firepool.testing.control import cpu_pool, ready_pods, request, run_job


@pytest.mark.parametrize(
    ("end", "max_retries", "state", "error"),
    [
        (AttemptEnd(exit_code=0), 0, JobState.SUCCEEDED, None),
        (AttemptEnd(exit_code=2), 0, JobState.FAILED, JobErrorClass.NON_ZERO_EXIT),
        (AttemptEnd(exit_code=2), 3, JobState.QUEUED, JobErrorClass.NON_ZERO_EXIT),
        (AttemptEnd(exit_code=143, timed_out=True), 3, JobState.FAILED, JobErrorClass.TIMEOUT),
        (AttemptEnd(exit_code=143, cancelled=True), 3, JobState.CANCELLED, JobErrorClass.CANCELLED),
        (AttemptEnd(exit_code=1, pod_lost=True), 0, JobState.FAILED, JobErrorClass.POD_LOST),
    ],
    ids=["ok", "failed", "retried", "timeout", "cancelled", "lost"],
)
def test_every_verdict_keeps_the_exit_code_and_the_message(
    end: AttemptEnd, max_retries: int, state: JobState, error: JobErrorClass | None
) -> None:
    end = dataclasses.replace(end, message="the agent's words")
    verdict = judge(end, retries=0, max_retries=max_retries)
    assert (verdict.state, verdict.error_class) == (state, error)
    assert verdict.exit_code == end.exit_code  # whatever exited is reported, even on timeout
    assert verdict.message == "the agent's words"


def test_nothing_exited_and_no_reason_given_is_a_failed_launch() -> None:
    verdict = judge(AttemptEnd(), retries=0, max_retries=0)
    assert (verdict.state, verdict.error_class, verdict.exit_code) == (
        JobState.FAILED, JobErrorClass.LAUNCH_FAILED, None,
    )  # fmt: skip
    retried = judge(AttemptEnd(), retries=0, max_retries=1)
    assert (retried.state, retried.error_class) == (JobState.QUEUED, JobErrorClass.LAUNCH_FAILED)


def test_a_pass_claims_at_its_own_now() -> None:
    """The owner's hold is honoured before it expires and ignored after: the pass must hand
    the tracker its `now`."""
    t = Tracker([cpu_pool(idle_timeout=30.0)])
    (pod,) = ready_pods(t, "cpu", 1)
    run_job(t, request("first", tag="s"), 0.0)  # released at 1.0, held for alice until 31.0
    again = dispatch_pass(t, [QueuedJob(request("second", tag="s"))], 10.0)
    (leased,) = again.leases
    assert [(p.name, p.path) for p in leased.pods] == [(pod, AcquisitionPath.WARM)]

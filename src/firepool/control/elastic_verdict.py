"""What an elastic attempt's end means for its job.

An elastic job outlives its attempts: the round policy ends attempts to resize or preempt
them, injected or real failures kill them, and only an attempt that finishes the training
ends the job. So the plain task verdict (`dispatch.judge`) does not apply; this one returns
both the job's fate and the outcome the lifecycle (`ElasticLifecycle.attempt_exited`) needs.

* stopped by the broker for a resize or preemption and exited cleanly -> the job re-queues
  with error class `Preempted` (not a failure: it resumes from its checkpoint);
* exited 0 on its own -> the training is complete, the job succeeds;
* cancelled -> CANCELLED; timed out -> FAILED, as for tasks;
* anything else (a crash, a kill, a lost pod, or a stop that did not exit cleanly) is a
  failure: the job re-queues while its failures stay within `max_retries`, else it fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from firepool.control.dispatch import AttemptEnd, Verdict, judge
from firepool.control.elastic import ExitOutcome
from firepool.model import JobErrorClass, JobState


@dataclass(frozen=True, slots=True)
class ElasticVerdict:
    verdict: Verdict
    outcome: ExitOutcome  # what the lifecycle is told
    failure: bool  # counts against max_retries


def judge_elastic(
    end: AttemptEnd, *, stop_requested: bool, failures: int, max_retries: int
) -> ElasticVerdict:
    """`failures` is the count before this attempt; `stop_requested` is True when the broker
    asked the attempt to stop (resize or preemption)."""
    if end.cancelled or end.timed_out:
        return ElasticVerdict(judge(end, 0, 0), "completed", failure=False)
    clean = end.exit_code == 0 and end.signal is None and not end.oom
    if stop_requested and clean:
        requeue = Verdict(
            JobState.QUEUED, JobErrorClass.PREEMPTED, 0, "resized by the round policy"
        )
        return ElasticVerdict(requeue, "checkpointed", failure=False)
    if clean:
        return ElasticVerdict(judge(end, 0, 0), "completed", failure=False)
    verdict = judge(end, failures, max_retries)
    return ElasticVerdict(verdict, "failed", failure=True)

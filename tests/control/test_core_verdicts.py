"""When the core judges an attempt: before its pods' reset (`judge_before_reset`) when the
verdict is final, with the release (`attempt_over`) when it is a retry or the attempt is being
reclaimed; never twice."""

from __future__ import annotations

from firepool.control.actions import RecordVerdict
from firepool.control.dispatch import AttemptEnd
from firepool.control.records import WaitReason
from firepool.model import JobState, PodState
from firepool.testing.control import cpu_pool
from firepool.testing.core_driver import StepDriver


def _launched(max_retries: int = 0) -> tuple[StepDriver, str]:
    d = StepDriver.of([cpu_pool(min_count=2, max_count=2, idle_timeout=100)], {"cpu": 4})
    d.settle()  # the floor is up
    job = d.submit("alice", "cpu", max_retries=max_retries)
    while d.starting:
        d.ready()
    assert d.launched == [job]
    return d, job


def test_a_final_verdict_goes_out_before_the_reset_and_not_again_at_the_release() -> None:
    d, job = _launched()
    actions = d.core.judge_before_reset(job, AttemptEnd(exit_code=0), d.now)
    assert [type(a) for a in actions] == [RecordVerdict]
    assert actions[0].verdict.state is JobState.SUCCEEDED
    d.act(actions)
    assert d.finished == {job: JobState.SUCCEEDED}
    assert d.core.judge_before_reset(job, AttemptEnd(exit_code=0), d.now) == []
    (pod,) = [p.name for p in d.core.tracker.pool_pods("cpu") if p.job == job]
    again = d.submit("alice", "cpu")  # the same session, while the pod is being reset
    assert d.core.tracker.get(pod).state is PodState.RUNNING and again not in d.launched
    released = d.core.attempt_over(job, AttemptEnd(exit_code=0), (), d.now)
    assert not any(isinstance(a, RecordVerdict) for a in released)
    d.act(released)
    assert d.launched[-1] == again
    assert d.verdicts[job] == [None]  # one verdict


def test_a_retry_is_judged_with_the_release() -> None:
    d, job = _launched(max_retries=1)
    assert d.core.judge_before_reset(job, AttemptEnd(exit_code=3), d.now) == []
    released = d.core.attempt_over(job, AttemptEnd(exit_code=3), (), d.now)
    verdicts = [a.verdict for a in released if isinstance(a, RecordVerdict)]
    assert len(verdicts) == 1 and verdicts[0].retry


def test_the_wait_for_the_own_pod_is_a_reason_of_its_own() -> None:
    """Not `no_capacity`: the scaler is not woken for a job whose pod is a reset away."""
    d, job = _launched()
    d.act(d.core.judge_before_reset(job, AttemptEnd(exit_code=0), d.now))
    again = d.submit("alice", "cpu")
    assert again not in d.launched
    entry = d.core.queued[again].entry
    outcome = d.core.tracker.claim(entry.request, d.now)
    assert getattr(outcome, "reason", None) is WaitReason.OWN_POD_RESETTING


def test_a_job_waiting_for_its_sessions_pod_is_not_demand_for_a_new_pod() -> None:
    d = StepDriver.of([cpu_pool(min_count=1, max_count=3, max_idle_count=0, idle_timeout=100)],
                      {"cpu": 4})  # fmt: skip
    d.settle()
    job = d.submit("alice", "cpu")
    while d.starting:
        d.ready()
    assert d.launched == [job] and len(d.core.tracker.pool_pods("cpu")) == 1
    d.act(d.core.judge_before_reset(job, AttemptEnd(exit_code=0), d.now))
    d.submit("alice", "cpu")  # the same session: its pod is a reset away
    d.act(d.core.reconcile("cpu", d.now))
    assert d.starting == []
    d.submit("bob", "cpu")  # another caller's job is demand
    d.act(d.core.reconcile("cpu", d.now))
    assert len(d.starting) == 1

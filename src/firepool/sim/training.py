"""Elastic training jobs in virtual time, driven through the shared `ElasticLifecycle`.

The scheduler paper's simulator (section IV) on the control code the service runs: jobs are
submitted to `control/elastic.py`'s lifecycle when they arrive; a round runs whenever the
lifecycle says one is due (a 60-s timer, and at once on an arrival, a completion or a failure);
and this driver only executes its decisions in virtual time, as the service does in real time:

* `StopAttempt`   the attempt saves its checkpoint (`RestartCost.save_s`), then exits:
                  `attempt_exited(..., "checkpointed")`;
* `StartAttempt`  the new attempt restores (`RestartCost.restore_s`; nothing to restore before
                  the first progress), and its first progress report ends the restore;
* progress        reported at the end of every restore and whenever training crosses a tenth of
                  the job, with the `fraction`, so the goodput prior follows training progress;
* completion      `attempt_exited(..., "completed")` once all the job's samples are processed;
* failures        at every 60-s slot boundary each restoring or running attempt fails with
                  probability lambda, drawn from `control.failures.fails(seed, job, slot)`, so every
                  policy meets the same failure stream: `attempt_exited(..., "failed")`, which
                  makes the next round due at once.

`T_progress`, `T_ckpt`, `T_queue` and the restart count are the lifecycle's own measurements,
read back for the results. Within one instant, job events run first, then failures, then at
most one round, so several events at the same time share a round. Deterministic for a seed.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from firepool.control.elastic import Decision as ElasticDecision
from firepool.control.elastic import (
    ElasticJobSpec,
    ElasticLifecycle,
    ExitOutcome,
    StartAttempt,
    StopAttempt,
    Unplaceable,
)
from firepool.control.failures import fails
from firepool.scheduling import (
    Configuration,
    RoundPolicy,
    SiaPolicy,
    ThroughputObservation,
)
from firepool.sim.trainmodel import (
    BUCKETS,
    CLUSTER_CAPACITY,
    SLOT_S,
    RestartCost,
    configs,
    goodputs,
    rate,
)
from firepool.sim.trainpolicy import PolicyView

#: Virtual time after which a run stops and its unfinished jobs count as censored: 10^6 s
#: (11.6 days), three times the longest JCT any policy reached on any paper workload when every
#: job finished. Without the age key, OAK can leave a job whose restart factor has collapsed
#: below `mu_na` idle for ever (ablation cell c); the horizon bounds such runs.
HORIZON_S = 1_000_000.0

# Event kinds, in the order they run within one instant.
_JOB, _SLOT, _ROUND = 0, 1, 2
# What a job event means (an arrival has epoch -1).
_RESTORED, _CROSSED, _SAVED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class TrainSpec:
    """One elastic job of a workload: application, arrival, and work in samples."""

    name: str
    app: str
    arrival: float
    work: float  # samples to process at the initial batch's efficiency (trace "progress" x M0)
    max_replicas: int = 12


@dataclass(slots=True)
class TrainResult:
    """One run. `jct` holds finished jobs; `censored` the jobs still unfinished at the horizon,
    with their JCT so far (horizon - arrival): a lower bound that the mean and max include, so
    a policy that starves a job cannot look better for it."""

    policy: str
    jct: dict[str, float] = field(default_factory=dict)
    censored: dict[str, float] = field(default_factory=dict)
    restarts: int = 0
    rounds: int = 0
    decisions: int = 0  # rounds the policy actually solved (the rest reused a memo)
    decide_s: float = 0.0
    unfinished: int = 0
    t_ckpt: float = 0.0  # summed over jobs, as the lifecycle measured them
    t_queue: float = 0.0
    t_progress: float = 0.0

    @property
    def all_jct(self) -> list[float]:
        return [*self.jct.values(), *self.censored.values()]

    @property
    def mean_jct(self) -> float:
        values = self.all_jct
        return float(np.mean(values)) if values else math.nan

    @property
    def max_jct(self) -> float:
        values = self.all_jct
        return max(values) if values else math.nan


# A job's phase as the simulator executes it (the lifecycle keeps its own, for the policy).
_IDLE, _RESTORING, _TRAINING, _SAVING = 0, 1, 2, 3


@dataclass(slots=True)
class _Job:
    """The simulator's side of one job: how much it has trained, and at what rate now."""

    index: int
    spec: TrainSpec
    job_id: str
    done: float = 0.0  # samples processed
    bucket: int = 0  # progress tenth, 0..BUCKETS-1
    phase: int = _IDLE
    attempt: int = 0  # the live attempt, 0 when none
    config: Configuration | None = None
    rate: float = 0.0
    since: float = 0.0  # when `done` was last brought up to date
    epoch: int = 0  # bumped to drop the job's pending event


class _Driver:
    """Executes the lifecycle's decisions for one run; one object per `simulate` call."""

    def __init__(
        self,
        view: PolicyView,
        jobs: Sequence[TrainSpec],
        lam: float,
        seed: int,
        round_s: float,
        cost: RestartCost,
    ) -> None:
        self.view = view
        self.lam = lam
        self.seed = seed
        self.cost = cost
        self.life = ElasticLifecycle(CLUSTER_CAPACITY, self._goodputs, round_s=round_s)
        self.jobs = [_Job(i, s, str(i)) for i, s in enumerate(jobs)]
        self.by_id = {j.job_id: j for j in self.jobs}
        self.heap: list[tuple[float, int, int, int, int, int]] = []
        self.seq = 0
        self.now = 0.0
        self.left = len(self.jobs)  # not finished
        self.active = 0  # arrived and not finished
        self.live = 0  # attempts restoring or training: what can fail
        self.round_queued = False
        self.timer_at = math.inf
        self.slot_queued = False
        self.finished: dict[str, float] = {}

    # ------------------------------------------------------------------ lifecycle inputs

    def _goodputs(
        self, spec: ElasticJobSpec, observed: Sequence[ThroughputObservation], fraction: float
    ) -> tuple[float, ...]:
        """The fitted prior at the reported progress. The simulated throughput is that very
        prior, so the driver reports no measured rate (it would only restate the prior)."""
        job = self.by_id[spec.job_id]
        bucket = min(BUCKETS - 1, int(fraction * BUCKETS))
        return goodputs(job.spec.app, job.spec.max_replicas, bucket)

    def remaining_work(self, job_id: str) -> float:
        """Seconds of work left on one GPU at the current progress (Gavel's input)."""
        job = self.by_id[job_id]
        self._bring_up_to_date(job)
        one = configs(job.spec.app, job.spec.max_replicas)[0]
        return max(1.0, job.spec.work - job.done) / max(rate(job.spec.app, one, job.bucket), 1e-9)

    # ------------------------------------------------------------------ event queue

    def _push(self, at: float, kind: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, kind, self.seq, a, b, c))

    def _want_round(self) -> None:
        if not self.round_queued and self.life.round_due(self.now) is not None:
            self.round_queued = True
            self._push(self.now, _ROUND)

    def _arm_timer(self) -> None:
        at = self.life.next_round_at
        if at != self.timer_at:
            self.timer_at = at
            self._push(at, _ROUND, 1)

    def _arm_slot(self) -> None:
        if self.lam > 0.0 and self.live and not self.slot_queued:
            self.slot_queued = True
            self._push(math.floor(self.now / SLOT_S) * SLOT_S + SLOT_S, _SLOT)

    # ------------------------------------------------------------------ run

    def run(self, max_rounds: int, horizon_s: float) -> float:
        """Run until every job finished, the horizon or `max_rounds`; returns the end time."""
        for job in self.jobs:
            self._push(job.spec.arrival, _JOB, job.index, -1)
        heap = self.heap
        pop = heapq.heappop
        while heap and self.left and self.view.rounds < max_rounds:
            if heap[0][0] > horizon_s:
                return horizon_s
            at, kind, _, a, b, c = pop(heap)
            self.now = at
            if kind == _JOB:
                job = self.jobs[a]
                if b < 0:
                    self._arrive(job)
                elif b == job.epoch:
                    if c == _RESTORED:
                        self._restored(job)
                    elif c == _CROSSED:
                        self._crossed(job)
                    else:
                        self._saved(job)
            elif kind == _SLOT:
                self.slot_queued = False
                self._failures()
            elif a == 0 or at == self.timer_at:
                if a:
                    self.timer_at = math.inf
                else:
                    self.round_queued = False
                # A round with no job in the system decides nothing, and the next arrival
                # runs a round (and resets the timer) anyway: skipping it changes nothing.
                if self.active and self.life.round_due(at) is not None:
                    self._round()
        return self.now

    def _arrive(self, job: _Job) -> None:
        s = job.spec
        self.active += 1
        self.life.submit(
            ElasticJobSpec(
                job.job_id,
                s.app,
                configs(s.app, s.max_replicas),
                submitted_at=s.arrival,
                progress_fraction=0.0,
            ),
            self.now,
        )
        self._want_round()

    def _round(self) -> None:
        outcome = self.life.run_round(self.now, self.view)
        self._execute(outcome.decisions)
        self._arm_timer()

    def _execute(self, decisions: Sequence[ElasticDecision]) -> None:
        for d in decisions:
            if isinstance(d, StopAttempt):
                self._stop(self.by_id[d.job_id])
            elif isinstance(d, StartAttempt):
                self._start(self.by_id[d.job_id], d)
            elif isinstance(d, Unplaceable):  # pragma: no cover - every job fits 12 GPUs
                raise RuntimeError(f"job {d.job_id} cannot run on this cluster: {d.reason}")
        self._want_round()
        self._arm_slot()

    # ------------------------------------------------------------------ one job

    def _bring_up_to_date(self, job: _Job) -> None:
        if job.phase == _TRAINING:
            job.done = min(job.spec.work, job.done + job.rate * (self.now - job.since))
        job.since = self.now

    def _halt(self, job: _Job, phase: int) -> None:
        """The live attempt stops making progress (stop, failure, end): drop its pending
        event."""
        self._bring_up_to_date(job)
        if job.phase in (_RESTORING, _TRAINING):
            self.live -= 1
        job.phase = phase
        job.epoch += 1

    def _exited(self, job: _Job, outcome: ExitOutcome) -> Sequence[ElasticDecision]:
        attempt, job.attempt, job.config = job.attempt, 0, None
        job.phase = _IDLE
        return self.life.attempt_exited(job.job_id, attempt, self.now, outcome)

    def _stop(self, job: _Job) -> None:
        self._halt(job, _SAVING)
        self._push(self.now + self.cost.save_s(job.spec.app), _JOB, job.index, job.epoch, _SAVED)

    def _saved(self, job: _Job) -> None:
        self._execute(self._exited(job, "checkpointed"))

    def _start(self, job: _Job, d: StartAttempt) -> None:
        job.attempt = d.attempt
        job.config = d.configuration
        job.phase = _RESTORING
        job.epoch += 1
        job.since = self.now
        self.live += 1
        # Nothing to restore before the job has trained at all.
        restore = self.cost.restore_s(job.spec.app) if job.done > 0.0 else 0.0
        if restore > 0.0:
            self._push(self.now + restore, _JOB, job.index, job.epoch, _RESTORED)
        else:
            self._restored(job)

    def _restored(self, job: _Job) -> None:
        self.life.progress(job.job_id, job.attempt, self.now, fraction=job.bucket / BUCKETS)
        job.phase = _TRAINING
        job.since = self.now
        self._train(job)

    def _train(self, job: _Job) -> None:
        """Set the rate for the current bucket and schedule the next crossing (or the end)."""
        assert job.config is not None
        job.rate = rate(job.spec.app, job.config, job.bucket)
        target = job.spec.work * (job.bucket + 1) / BUCKETS
        need = max(0.0, target - job.done)
        self._push(self.now + need / job.rate, _JOB, job.index, job.epoch, _CROSSED)

    def _crossed(self, job: _Job) -> None:
        self._bring_up_to_date(job)
        if job.bucket + 1 >= BUCKETS:
            job.done = job.spec.work
            self._complete(job)
            return
        job.bucket += 1
        job.done = max(job.done, job.spec.work * job.bucket / BUCKETS)
        self.life.progress(job.job_id, job.attempt, self.now, fraction=job.bucket / BUCKETS)
        self._train(job)

    def _complete(self, job: _Job) -> None:
        self._halt(job, _IDLE)
        self.left -= 1
        self.active -= 1
        self.finished[job.spec.name] = self.now - job.spec.arrival
        self._execute(self._exited(job, "completed"))

    def _failures(self) -> None:
        slot = round(self.now / SLOT_S)
        failed = [
            job
            for job in self.jobs
            if job.phase in (_RESTORING, _TRAINING) and fails(self.seed, job.index, slot, self.lam)
        ]
        for job in failed:
            self._halt(job, _IDLE)
            self._execute(self._exited(job, "failed"))
        self._arm_slot()


def simulate(
    policy: RoundPolicy,
    jobs: Sequence[TrainSpec],
    *,
    lam: float = 0.0,
    seed: int = 0,
    round_s: float = 60.0,
    mask_restart: bool = False,
    cost: RestartCost | None = None,
    horizon_s: float = HORIZON_S,
    max_rounds: int = 200_000,
) -> TrainResult:
    """Run `jobs` under `policy` until all finish or `horizon_s` of virtual time has passed;
    `mask_restart` hides progress from the policy (r = 1 for every job: ablation cell b)."""
    view = PolicyView(policy, mask_progress=mask_restart,
                      memo_goodput_only=isinstance(policy, SiaPolicy) and policy.goodput_only)
    driver = _Driver(view, jobs, lam, seed, round_s, cost or RestartCost())
    if policy.name.startswith("gavel"):
        view.remaining_work = driver.remaining_work
    end = driver.run(max_rounds, horizon_s)
    censored = {j.spec.name: end - j.spec.arrival for j in driver.jobs
                if j.spec.name not in driver.finished and j.spec.arrival <= end}
    result = TrainResult(policy.name, jct=driver.finished, censored=censored,
                         rounds=view.rounds, decisions=view.decisions, decide_s=view.decide_s,
                         unfinished=driver.left)
    for job in driver.jobs:
        if job.spec.arrival > end:
            continue
        t = driver.life.times(job.job_id)
        result.restarts += t.restarts
        result.t_ckpt += t.t_ckpt
        result.t_queue += t.t_queue
        result.t_progress += t.t_progress
    return result

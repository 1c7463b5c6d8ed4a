"""Elastic training jobs in real time: the broker's side of `control/elastic.py`.

The lifecycle decides (rounds, sizes, stops, starts); this driver keeps the few facts the
broker needs to carry the decisions out and answers the broker in plain `ElasticActions`:

* a start decided by a round waits here (`pending`) until the dispatcher claims its pods,
  then becomes `live` under the store's attempt id (`<job>:<retry>`);
* a stop of a live attempt is a graceful SIGTERM (the job checkpoints and exits); a stop of a
  start not yet dispatched is withdrawn on the spot;
* progress reports are accepted only for the live attempt, with a per-attempt token derived
  from the broker's secret, so a job can report without holding its caller's token;
* failures for experiments are drawn per round from a seeded source (`poisson_failures`) and
  executed by the broker as SIGKILLs.

Capacity is counted in pods: a pool's `max_count` is what its elastic jobs may hold, one rank
per pod; the tracker still places every attempt, so pods busy with short jobs only delay a
decided start. Elastic state lives in memory: after a broker restart an attempt re-attached by
recovery runs on at its size until it ends (its verdict is judged as elastic), and the job
rejoins the rounds when it is queued again; its measured times start from zero.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from firepool.control.dispatch import AttemptEnd, Verdict
from firepool.control.elastic import (
    Decision,
    ElasticJobSpec,
    ElasticLifecycle,
    FailureEvent,
    JobTimes,
    StartAttempt,
    StopAttempt,
    Unplaceable,
)
from firepool.control.elastic_verdict import ElasticVerdict, judge_elastic
from firepool.model import ACCELERATORS, JobState, NotFoundError, PoolSpec
from firepool.protocol import JobEnv
from firepool.scheduling import (
    Configuration,
    GpuSpec,
    JobRoundState,
    RoundInput,
    ThroughputObservation,
    app_model,
    candidate_configurations,
    estimate_goodputs,
    make_policy,
)
from firepool.store import JobRecord

log = logging.getLogger("firepool.service.elastic")

#: Memory the goodput model's filter assumes for one CPU pod (its own memory is the job's
#: business: the prior only ranks sizes, the job's reports replace it).
_CPU_DEVICE_GIB = 1024.0


@dataclass(frozen=True)
class ElasticConfig:
    policy: str = "oak"
    round_s: float = 60.0
    tick_s: float = 0.5
    stop_grace_s: float = 30.0  # SIGTERM to SIGKILL when resizing: the checkpoint's time
    failure_rate: float = 0.0  # experiments: failures per round per running job
    failure_seed: int = 0
    #: Give capacity the policy leaves idle to jobs that want it (see scheduling.backfill).
    work_conserving: bool = True


@dataclass
class _Attempt:
    life_attempt: int  # the lifecycle's attempt number
    world: int
    store_attempt: str | None = None  # `<job>:<retry>` once dispatched
    stop_requested: bool = False
    verdict: ElasticVerdict | None = None


@dataclass
class ElasticActions:
    """What the broker must do after a driver call."""

    wake: bool = False  # a start is pending: run a dispatch pass
    stop: list[str] = field(default_factory=list)  # live jobs to stop gracefully
    unschedulable: list[tuple[str, str]] = field(default_factory=list)  # (job, reason)
    failures: list[FailureEvent] = field(default_factory=list)  # to kill at `at`


class ElasticDriver:
    def __init__(
        self,
        pools: Mapping[str, PoolSpec],
        *,
        config: ElasticConfig,
        checkpoint_root: Path,
        secret: bytes,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.pools = dict(pools)
        self.devices = {name: _device(spec) for name, spec in self.pools.items()}
        self.checkpoint_root = checkpoint_root
        self._secret = secret
        self.policy = make_policy(config.policy)
        self.life = ElasticLifecycle(
            {name: spec.max_count for name, spec in self.pools.items()},
            self._goodputs,
            round_s=config.round_s,
            start=clock(),
            work_conserving=config.work_conserving,
        )
        self.known: set[str] = set()
        self.pending: dict[str, _Attempt] = {}
        self.live: dict[str, _Attempt] = {}
        self.decide_ms: collections.deque[float] = collections.deque(maxlen=100_000)
        self.rounds = 0
        self._latest = clock()
        self.injected = 0  # failures actually delivered (experiments)
        self._rng = random.Random(f"elastic-failures/{config.failure_seed}")

    def _clamp(self, now: float) -> float:
        """Wall clocks step back (NTP) and callers read them at slightly different moments;
        the lifecycle wants time that never decreases."""
        self._latest = max(self._latest, now)
        return self._latest

    def warm_up(self) -> None:
        """Solve one tiny round so the first real round does not pay for importing and
        setting up the solver (about half a second): the broker calls it off the loop."""
        probe = Configuration("warm-up", 1)
        self.policy.decide(
            RoundInput({"warm-up": 1}, (JobRoundState("warm-up", (probe,), (2.0,)),))
        )

    # ------------------------------------------------------------------ goodput prior

    def _goodputs(
        self, spec: ElasticJobSpec, observed: Sequence[ThroughputObservation], fraction: float
    ) -> tuple[float, ...]:
        return estimate_goodputs(
            app_model(spec.app),
            spec.configurations,
            self.devices,
            progress=fraction,
            observations=observed,
        )

    def configurations(self, job: JobRecord) -> tuple[Configuration, ...]:
        """Every world size the job allows on its pool (one pod per node), after the goodput
        model's memory filter; empty when none fits, which the round reports."""
        elastic = job.spec.elastic
        assert elastic is not None
        pool = job.spec.pool
        if pool not in self.devices:
            return ()
        top = min(elastic.max_pods, self.pools[pool].max_count)
        choices = tuple(range(elastic.min_pods, top + 1))
        if not choices:
            return ()
        keep, _ = candidate_configurations(
            app_model(elastic.app),
            {pool: self.devices[pool]},
            min_replicas=elastic.min_pods,
            max_replicas=top,
            replica_choices=choices,
        )
        return keep

    # ------------------------------------------------------------------ events

    def submit(self, job: JobRecord, now: float) -> bool:
        """Take a queued elastic job into the rounds (idempotent); True if it is new."""
        now = self._clamp(now)
        if job.id in self.known:
            return False
        elastic = job.spec.elastic
        assert elastic is not None
        self.known.add(job.id)
        submitted = job.timings.get("submitted") or now
        self.life.submit(
            ElasticJobSpec(
                job.id,
                elastic.app,
                self.configurations(job),
                submitted_at=min(submitted, now),
                p_restart=elastic.p_restart_s,
            ),
            now,
        )
        return True

    def round(self, now: float) -> ElasticActions | None:
        """Run a round if one is due; None when none was."""
        now = self._clamp(now)
        if self.life.round_due(now) is None:
            return None
        started = time.perf_counter()
        outcome = self.life.run_round(now, self.policy)
        self.decide_ms.append((time.perf_counter() - started) * 1000.0)
        self.rounds += 1
        actions = self._carry_out(outcome.decisions, now)
        if self.config.failure_rate > 0:
            actions.failures += self.life.poisson_failures(
                now, self._rng, self.config.failure_rate
            )
        return actions

    def _carry_out(self, decisions: Iterable[Decision], now: float) -> ElasticActions:
        actions = ElasticActions()
        queue = list(decisions)
        while queue:
            decision = queue.pop(0)
            log.info("elastic decision %s", decision)
            if isinstance(decision, StartAttempt):
                self.pending[decision.job_id] = _Attempt(decision.attempt, decision.world_size)
                actions.wake = True
            elif isinstance(decision, StopAttempt):
                live = self.live.get(decision.job_id)
                if live is not None and live.life_attempt == decision.attempt:
                    live.stop_requested = True
                    actions.stop.append(decision.job_id)
                    continue
                waiting = self.pending.pop(decision.job_id, None)
                if waiting is not None:  # never dispatched: nothing to checkpoint
                    queue += self.life.attempt_exited(
                        decision.job_id, waiting.life_attempt, now, "checkpointed"
                    )
            elif isinstance(decision, Unplaceable):
                actions.unschedulable.append((decision.job_id, decision.reason))
                queue += self.life.withdraw(decision.job_id, now)
        return actions

    def dispatchable(self, job_id: str) -> int | None:
        """The world size of a decided start waiting for its pods, or None."""
        waiting = self.pending.get(job_id)
        return waiting.world if waiting is not None else None

    def dispatched(self, job_id: str, store_attempt: str) -> None:
        attempt = self.pending.pop(job_id)
        attempt.store_attempt = store_attempt
        self.live[job_id] = attempt

    def lost_race(self, job_id: str) -> None:
        """The start's commit lost a race: the decided start waits again."""
        attempt = self.live.pop(job_id, None)
        if attempt is not None:
            attempt.store_attempt = None
            self.pending[job_id] = attempt

    def judge(self, job: JobRecord, end: AttemptEnd) -> Verdict:
        """The verdict of the job's live attempt; remembered for `exited`."""
        live = self.live.get(job.id)
        verdict = judge_elastic(
            end,
            stop_requested=live is not None and live.stop_requested,
            failures=self.life.times(job.id).failures,
            max_retries=job.spec.max_retries,
        )
        if live is not None:
            live.verdict = verdict
        return verdict.verdict

    def exited(self, job: JobRecord, now: float) -> ElasticActions:
        """The live attempt's verdict is recorded (`job` as the store has it now)."""
        now = self._clamp(now)
        live = self.live.pop(job.id, None)
        if live is None:
            # An attempt re-attached after a restart, or one of a job the rounds never saw.
            return self._untracked_exit(job, now)
        outcome = live.verdict.outcome if live.verdict is not None else "failed"
        log.info("elastic attempt %s ended: %s; job %s", live.store_attempt, outcome,
                 job.state.value)
        decisions = self.life.attempt_exited(job.id, live.life_attempt, now, outcome)
        if job.state.terminal and outcome != "completed":
            decisions += self.life.withdraw(job.id, now)
        return self._carry_out(decisions, now)

    def _untracked_exit(self, job: JobRecord, now: float) -> ElasticActions:
        if job.state is JobState.QUEUED:
            self.submit(job, now)
        return ElasticActions(wake=True)

    def cancelled(self, job_id: str, now: float) -> ElasticActions:
        """A cancel request: a live attempt is stopped by the broker and ends through
        `exited`; anything else leaves the rounds now."""
        now = self._clamp(now)
        if job_id not in self.known or job_id in self.live:
            return ElasticActions()
        waiting = self.pending.pop(job_id, None)
        decisions = self.life.withdraw(job_id, now)
        if waiting is not None:
            decisions += self.life.attempt_exited(job_id, waiting.life_attempt, now, "failed")
        return self._carry_out(decisions, now)

    # ------------------------------------------------------------------ progress

    def progress(
        self,
        job_id: str,
        attempt: str,
        now: float,
        *,
        samples_per_s: float | None,
        fraction: float | None,
    ) -> bool:
        now = self._clamp(now)
        if job_id not in self.known:
            raise NotFoundError(f"job {job_id} is not an elastic job of this broker",
                                field="job_id")
        live = self.live.get(job_id)
        if live is None or live.store_attempt != attempt:
            return False
        return self.life.progress(
            job_id, live.life_attempt, now, samples_per_s=samples_per_s, fraction=fraction
        )

    def progress_token(self, attempt: str) -> str:
        return hmac.new(self._secret, attempt.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, attempt: str, token: str) -> bool:
        return hmac.compare_digest(self.progress_token(attempt), token)

    def environment(self, job: JobRecord, base_url: str | None) -> dict[str, str]:
        """What the attempt's processes get on top of torchrun's rank variables."""
        directory = self.checkpoint_root / job.id
        directory.mkdir(parents=True, exist_ok=True)
        env = {
            JobEnv.JOB_ID: job.id,
            JobEnv.ATTEMPT: job.attempt,
            JobEnv.PROGRESS_TOKEN: self.progress_token(job.attempt),
            JobEnv.CHECKPOINT_DIR: str(directory),
        }
        if base_url is not None:
            env[JobEnv.URL] = base_url
        return env

    def times(self, job_id: str, now: float) -> JobTimes:
        now = self._clamp(now)
        return self.life.times(job_id, now)


def _device(spec: PoolSpec) -> GpuSpec:
    """A pool's pod as the goodput model's device: its accelerator's memory (CPU pods: ample),
    one device per node because every pod is its own machine as far as the ranks can tell."""
    memory = float(ACCELERATORS[spec.accelerator]) if spec.accelerator else _CPU_DEVICE_GIB
    return GpuSpec(spec.name, memory_gib=memory, speed=1.0, gpus_per_node=1)

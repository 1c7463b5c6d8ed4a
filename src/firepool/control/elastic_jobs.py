"""Elastic jobs inside the broker core: the round lifecycle joined to the dispatcher.

`control/elastic.py` decides sizes in rounds; this module keeps the few facts that connect a
decision to the job path, as plain data, for whichever driver runs the core:

* a start decided by a round waits (`pending`) until the dispatcher claims its pods, then is
  `live` under the store's attempt id (`<job>:<retry>`): an elastic job claims pods only once a
  round has sized it;
* a stop of a live attempt is graceful (the job checkpoints and exits); a stop of a start not
  yet dispatched is withdrawn on the spot;
* failures for experiments come from the shared failure stream (`control/failures.py`).

Capacity is counted in pods: a pool's `max_count` is what its elastic jobs may hold, one rank
per pod; the tracker still places every attempt, so pods busy with short jobs only delay a
decided start.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from firepool.control.dispatch import AttemptEnd, Verdict
from firepool.control.elastic import (
    Decision,
    ElasticJobSpec,
    ElasticLifecycle,
    JobTimes,
    StartAttempt,
    StopAttempt,
    Unplaceable,
)
from firepool.control.elastic_verdict import ElasticVerdict, judge_elastic
from firepool.control.failures import Failure, failures_between
from firepool.control.records import Ticket
from firepool.model import ACCELERATORS, JobState, NotFoundError, PoolSpec, RoundAllocation
from firepool.scheduling import (
    Configuration,
    GpuSpec,
    JobRoundState,
    RoundInput,
    RoundPolicy,
    ThroughputObservation,
    app_model,
    candidate_configurations,
    estimate_goodputs,
)

#: Memory the goodput model's filter assumes for one CPU pod (its own memory is the job's
#: business: the prior only ranks sizes, the job's reports replace it).
_CPU_DEVICE_GIB = 1024.0


@dataclass(frozen=True, slots=True)
class ElasticRules:
    """How elastic jobs are sized and (in experiments) failed, for every driver alike."""

    policy: str = "oak"
    round_s: float = 60.0
    #: Experiments: the probability that a live attempt fails at each round boundary.
    failure_rate: float = 0.0
    failure_seed: int = 0
    #: Give capacity the policy leaves idle to jobs that want it (see scheduling.backfill).
    work_conserving: bool = True


@dataclass(slots=True)
class _Attempt:
    life_attempt: int  # the lifecycle's attempt number
    world: int
    store_attempt: str | None = None  # `<job>:<retry>` once dispatched
    stop_requested: bool = False
    verdict: ElasticVerdict | None = None


@dataclass(slots=True)
class ElasticStep:
    """What the core must do after an elastic event."""

    dispatch: bool = False  # a start is pending: run a dispatch pass
    stop: list[str] = field(default_factory=list)  # live jobs to stop gracefully
    unschedulable: list[tuple[str, str]] = field(default_factory=list)  # (job, reason)
    failures: list[Failure] = field(default_factory=list)  # to kill at `at`


class ElasticJobs:
    def __init__(
        self,
        pools: Mapping[str, PoolSpec],
        rules: ElasticRules,
        policy: RoundPolicy,
        *,
        start: float,
    ) -> None:
        self.rules = rules
        self.pools = dict(pools)
        self.devices = {name: _device(spec) for name, spec in self.pools.items()}
        self.policy = policy
        self.life = ElasticLifecycle(
            {name: spec.max_count for name, spec in self.pools.items()},
            self._goodputs,
            round_s=rules.round_s,
            start=start,
            work_conserving=rules.work_conserving,
        )
        self.known: set[str] = set()
        self.pending: dict[str, _Attempt] = {}
        self.live: dict[str, _Attempt] = {}
        self.rounds = 0
        #: The latest rounds' allocations, newest last (the dashboard shows them).
        self.allocations: collections.deque[RoundAllocation] = collections.deque(maxlen=20)
        self._latest = start
        self._failures_until = start

    def _clamp(self, now: float) -> float:
        """Wall clocks step back (NTP) and callers read them at slightly different moments;
        the lifecycle wants time that never decreases."""
        self._latest = max(self._latest, now)
        return self._latest

    def warm_up(self) -> None:
        """Solve one tiny round so the first real round does not pay for setting the solver
        up (about half a second); a driver calls it off its critical path."""
        probe = Configuration("warm-up", 1)
        self.policy.decide(
            RoundInput({"warm-up": 1}, (JobRoundState("warm-up", (probe,), (2.0,)),))
        )

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

    def configurations(self, ticket: Ticket) -> tuple[Configuration, ...]:
        """Every world size the job allows on its pool (one pod per node), after the goodput
        model's memory filter; empty when none fits, which the round reports."""
        elastic = ticket.spec.elastic
        pool = ticket.spec.pool
        if elastic is None or pool not in self.devices:
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

    def goodput(self, ticket: Ticket, world: int, fraction: float) -> float:
        """The fitted model's goodput of the job at `world` pods (1.0 = one pod): what a
        simulator takes as the job's true speed, and the prior the rounds start from."""
        elastic = ticket.spec.elastic
        if elastic is None:
            return 0.0
        for cfg in self.configurations(ticket):
            if cfg.replicas == world:
                return estimate_goodputs(
                    app_model(elastic.app),
                    (cfg,),
                    self.devices,
                    progress=min(max(fraction, 0.0), 1.0),
                )[0]
        return 0.0

    # ------------------------------------------------------------------ events

    def submit(self, ticket: Ticket, now: float) -> bool:
        """Take a queued elastic job into the rounds (idempotent); True if it is new."""
        now = self._clamp(now)
        elastic = ticket.spec.elastic
        if ticket.job in self.known or elastic is None:
            return False
        self.known.add(ticket.job)
        self.life.submit(
            ElasticJobSpec(
                ticket.job,
                elastic.app,
                self.configurations(ticket),
                submitted_at=min(ticket.submitted_at or now, now),
                p_restart=elastic.p_restart_s,
            ),
            now,
        )
        return True

    def round_due(self, now: float) -> bool:
        return self.life.round_due(self._clamp(now)) is not None

    def round(self, now: float) -> ElasticStep | None:
        """Run a round if one is due; None when none was."""
        now = self._clamp(now)
        if self.life.round_due(now) is None:
            return None
        outcome = self.life.run_round(now, self.policy)
        self.rounds += 1
        result = outcome.result
        pods = {job: 0 if c is None else c.replicas for job, c in result.assignments.items()}
        if pods:  # a round with no elastic job has nothing to show
            self.allocations.append(RoundAllocation(self.rounds, now, result.policy, pods))
        step = self._carry_out(outcome.decisions, now)
        if self.rules.failure_rate > 0:
            until = now + self.rules.round_s
            start = max(self._failures_until, now)
            step.failures += failures_between(
                self.life.running(),
                start,
                until,
                seed=self.rules.failure_seed,
                rate=self.rules.failure_rate,
                slot_s=self.rules.round_s,
            )
            self._failures_until = max(self._failures_until, until)
        return step

    def _carry_out(self, decisions: Iterable[Decision], now: float) -> ElasticStep:
        step = ElasticStep()
        queue = list(decisions)
        while queue:
            decision = queue.pop(0)
            if isinstance(decision, StartAttempt):
                self.pending[decision.job_id] = _Attempt(decision.attempt, decision.world_size)
                step.dispatch = True
            elif isinstance(decision, StopAttempt):
                live = self.live.get(decision.job_id)
                if live is not None and live.life_attempt == decision.attempt:
                    live.stop_requested = True
                    step.stop.append(decision.job_id)
                    continue
                waiting = self.pending.pop(decision.job_id, None)
                if waiting is not None:  # never dispatched: nothing to checkpoint
                    queue += self.life.attempt_exited(
                        decision.job_id, waiting.life_attempt, now, "checkpointed"
                    )
            elif isinstance(decision, Unplaceable):
                step.unschedulable.append((decision.job_id, decision.reason))
                queue += self.life.withdraw(decision.job_id, now)
        return step

    def world(self, job_id: str) -> int | None:
        """The world size of a decided start waiting for its pods, or None (not sized)."""
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

    def live_attempt(self, job_id: str) -> int | None:
        """The lifecycle's number of the job's live attempt (failures name it)."""
        live = self.live.get(job_id)
        return live.life_attempt if live is not None else None

    def judge(self, ticket: Ticket, end: AttemptEnd) -> Verdict:
        """The verdict of the job's live attempt; remembered for `exited`."""
        live = self.live.get(ticket.job)
        verdict = judge_elastic(
            end,
            stop_requested=live is not None and live.stop_requested,
            failures=self.life.times(ticket.job).failures if ticket.job in self.known else 0,
            max_retries=ticket.spec.max_retries,
        )
        if live is not None:
            live.verdict = verdict
        return verdict.verdict

    def exited(self, ticket: Ticket, state: JobState, now: float) -> ElasticStep:
        """The live attempt's verdict is recorded; `state` is the job's state in the store."""
        now = self._clamp(now)
        live = self.live.pop(ticket.job, None)
        if live is None:
            # An attempt re-attached after a restart, or one of a job the rounds never saw.
            if state is JobState.QUEUED:
                self.submit(ticket, now)
            return ElasticStep(dispatch=True)
        outcome = live.verdict.outcome if live.verdict is not None else "failed"
        decisions = self.life.attempt_exited(ticket.job, live.life_attempt, now, outcome)
        if state.terminal and outcome != "completed":
            decisions += self.life.withdraw(ticket.job, now)
        return self._carry_out(decisions, now)

    def cancelled(self, job_id: str, now: float) -> ElasticStep:
        """A cancel request: a live attempt is stopped by the driver and ends through
        `exited`; anything else leaves the rounds now."""
        now = self._clamp(now)
        if job_id not in self.known or job_id in self.live:
            return ElasticStep()
        waiting = self.pending.pop(job_id, None)
        decisions = self.life.withdraw(job_id, now)
        if waiting is not None:
            decisions += self.life.attempt_exited(job_id, waiting.life_attempt, now, "failed")
        return self._carry_out(decisions, now)

    def progress(
        self,
        job_id: str,
        attempt: str,
        now: float,
        *,
        samples_per_s: float | None,
        fraction: float | None,
    ) -> bool:
        """A progress report of the live attempt; False for a stale attempt's."""
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

    def times(self, job_id: str, now: float) -> JobTimes:
        return self.life.times(job_id, self._clamp(now))


def _device(spec: PoolSpec) -> GpuSpec:
    """A pool's pod as the goodput model's device: its accelerator's memory (CPU pods: ample),
    one device per node because every pod is its own machine as far as the ranks can tell."""
    memory = float(ACCELERATORS[spec.accelerator]) if spec.accelerator else _CPU_DEVICE_GIB
    return GpuSpec(spec.name, memory_gib=memory, speed=1.0, gpus_per_node=1)

"""A step-by-step driver of the broker core for property tests: every action is recorded,
and the test chooses when each pending outcome (a pod ready or deleted, an attempt over)
arrives, so Hypothesis can explore the orders a real driver might produce."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from firepool.control.actions import (
    Action,
    CreatePod,
    DeletePod,
    Dispatch,
    LaunchAttempt,
    Reconcile,
    RecordVerdict,
    StartAttempt,
    StopAttempt,
)
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore, CoreConfig
from firepool.control.dispatch import AttemptEnd
from firepool.control.records import Ticket
from firepool.model import JobErrorClass, JobSpec, JobState, PoolSpec


@dataclass
class StepDriver:
    """The core plus the outcomes it is waiting for; `now` advances one second per step."""

    core: BrokerCore
    now: float = 0.0
    starting: list[str] = field(default_factory=list)
    deleting: list[str] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    tickets: dict[str, Ticket] = field(default_factory=dict)
    stopped: dict[str, AttemptEnd] = field(default_factory=dict)
    verdicts: dict[str, list[JobErrorClass | None]] = field(default_factory=dict)
    finished: dict[str, JobState] = field(default_factory=dict)
    #: (pod's template, its pool's template) for every pod of every claim.
    claimed: list[tuple[int, int]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    @classmethod
    def of(
        cls,
        pools: Iterable[PoolSpec],
        budgets: dict[str, int] | None = None,
        config: CoreConfig | None = None,
    ) -> StepDriver:
        names = (f"pod-{i}" for i in itertools.count())
        core = BrokerCore(
            pools,
            BudgetLedger(budgets),
            new_name=lambda _p: next(names),
            config=config or CoreConfig(elastic=None),
        )
        return cls(core)

    def act(self, actions: Iterable[Action]) -> None:
        todo = list(actions)
        while todo:
            action = todo.pop(0)
            more: list[Action] = []
            if isinstance(action, Dispatch):
                more = self.core.dispatch(self.now)
            elif isinstance(action, Reconcile):
                more = self.core.reconcile(action.pool, self.now)
            elif isinstance(action, CreatePod):
                self.starting.append(action.order.pod)
            elif isinstance(action, DeletePod):
                if action.pod in self.starting:
                    self.starting.remove(action.pod)
                if action.pod not in self.deleting:
                    self.deleting.append(action.pod)
            elif isinstance(action, StartAttempt):
                tracker = self.core.tracker
                for leased in action.lease.pods:
                    pod = tracker.get(leased.name)
                    assert pod is not None
                    version = self.core.specs[pod.pool].template_version
                    self.claimed.append((pod.template, version))
                more = self.core.committed(action.ticket.job, self.now)
            elif isinstance(action, LaunchAttempt):
                self.launched.append(action.job)
            elif isinstance(action, StopAttempt):
                self.stopped[action.job] = AttemptEnd(exit_code=-9, signal=9)
            elif isinstance(action, RecordVerdict):
                more = self._record(action)
            todo[:0] = more

    def _record(self, action: RecordVerdict) -> list[Action]:
        ticket, verdict = action.ticket, action.verdict
        self.verdicts.setdefault(ticket.job, []).append(verdict.error_class)
        if verdict.retry:
            reclaimed = verdict.error_class is JobErrorClass.RECLAIMED
            again = Ticket(
                ticket.job,
                ticket.caller,
                ticket.spec,
                ticket.submitted_at,
                ticket.retries + 1,
                ticket.reclaims + reclaimed,
            )
            self.tickets[ticket.job] = again
            return self.core.verdict_recorded(again, JobState.QUEUED, self.now)
        self.finished[ticket.job] = verdict.state
        return self.core.verdict_recorded(ticket, verdict.state, self.now)

    # ---------------------------------------------------------------- the test's moves
    def submit(self, caller: str, pool: str, max_retries: int = 0) -> str:
        job = f"job-{next(self._ids)}"
        spec = JobSpec(pool=pool, command=["x"], max_retries=max_retries, lease_tag="t")
        ticket = Ticket(job, caller, spec, self.now)
        self.tickets[job] = ticket
        self.act(self.core.submit(ticket, self.now))
        return job

    def ready(self, index: int = 0) -> None:
        if self.starting:
            self.act(self.core.pod_ready(self.starting.pop(index % len(self.starting)), self.now))

    def deleted(self, index: int = 0) -> None:
        if self.deleting:
            self.act(self.core.pod_deleted(self.deleting.pop(index % len(self.deleting)), self.now))

    def finish(self, index: int = 0, exit_code: int = 0) -> None:
        """One launched attempt exits (with `exit_code`, unless the core stopped it)."""
        if self.launched:
            job = self.launched.pop(index % len(self.launched))
            end = self.stopped.pop(job, AttemptEnd(exit_code=exit_code))
            self.act(self.core.attempt_over(job, end, (), self.now))

    def tick(self) -> None:
        self.now += 1.0

    def settle(
        self,
        steps: int = 2_000,
        step_s: float = 5.0,
        poll: Callable[[], list[Action]] | None = None,
    ) -> None:
        """Let every pending outcome arrive, and time pass (holds expire or are broken),
        until every job finished and nothing is left to do. `poll` runs every step (a
        capacity source's reading, as the service polls it)."""
        for _ in range(steps):
            if poll is not None:
                self.act(poll())
            self.act(
                [*self.core.tick(self.now), Dispatch(), *(Reconcile(p) for p in self.core.specs)]
            )
            idle = not (self.starting or self.deleting or self.launched)
            if idle and len(self.finished) == len(self.tickets):
                return
            self.now += step_s
            self.ready()
            self.finish()
            self.deleted()
        raise AssertionError("the core did not settle")

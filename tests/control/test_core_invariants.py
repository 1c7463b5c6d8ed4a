"""DESIGN.md invariants 1-6 on the broker core under random interleavings (Hypothesis).

The machine drives `BrokerCore` exactly as a driver does (events in, actions executed) and
keeps its own model of every pod, built only from the actions the core returned and the events
the machine itself chose: which pods exist and on which card, whether they are starting, free
or retiring, who last used them with which queue and tag, which job holds each card. Nothing is
copied back from the tracker. After every step it checks safety:
1. a pod is leased to at most one attempt, and a multi-pod claim takes all its pods or none;
2. a used pod never serves another caller; across a tag or queue boundary it serves one job
   and retires;
3. no attempt is launched before its RUNNING transition is committed;
4. budgets and pool ceilings, counted in physical GPUs or cores, are never exceeded;
5. a pod whose reset was not confirmed clean is never claimed again;
6. at most one job runs per physical GPU, and a card's next job launches only after the
   previous job's processes are gone;
and liveness, which a core that never claims or never launches would fail:
- after a dispatch pass, no queued one-pod job is left waiting while the model knows a pod it
  could take (its caller's own live hold, or a never-used ready pod on a free card), unless
  its own session's pod is being reset after an early verdict (it waits for that pod);
- a committed attempt whose cards are all free in the model has been launched.
Verdicts go out either with the release or before the reset (`judge_before_reset`), and an
attempt's verdict is recorded exactly once.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from firepool.control.actions import (
    Action,
    CreatePod,
    DeletePod,
    HoldPod,
    LaunchAttempt,
    RecordVerdict,
    StartAttempt,
)
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore, CoreConfig
from firepool.control.dispatch import AttemptEnd
from firepool.control.records import Lease, Ticket
from firepool.control.reservations import ReservationRules
from firepool.model import JobSpec, JobState, LeaseTagMode, PodRole, PoolSpec
from firepool.testing.control import cpu_pool, gpu_pool

EXAMPLES = 400 if os.environ.get("CI") == "true" else 100
LIMITS = {"H200": 3, "cpu": 4}
CPU_CALLER_LIMIT = 3


def pools(mode: LeaseTagMode) -> list[PoolSpec]:
    return [
        cpu_pool(
            max_count=5,
            min_count=1,
            max_idle_count=1,
            idle_timeout=15,
            step=2,
            lease_tag_mode=mode,
            max_pods_per_caller=CPU_CALLER_LIMIT,
        ),
        gpu_pool(
            standbys_per_active=2,
            max_count=4,
            min_count=1,
            idle_timeout=15,
            caller_hold_seconds=10,
            step=2,
            lease_tag_mode=mode,
        ),
    ]


@dataclass
class ModelPod:
    """What the machine knows of a pod, from actions and its own events only."""

    pool: str
    role: PodRole
    group: str | None
    dedicated: bool
    ready: bool = False
    job: str | None = None
    retiring: bool = False
    owner: tuple[str, str, str] | None = None  # caller, queue, tag of its last job
    hold_until: float = 0.0
    retire_after_job: bool = False
    unclean: bool = False  # released unclean: its processes may survive until it is deleted
    claims: list[str] = field(default_factory=list)


class CoreMachine(RuleBasedStateMachine):
    mode = LeaseTagMode.BOUNDARY
    config = CoreConfig(elastic=None, check_skips=True)

    def __init__(self) -> None:
        super().__init__()
        self.specs = {p.name: p for p in pools(self.mode)}
        self.ledger = BudgetLedger(LIMITS)
        names = (f"pod-{i}" for i in itertools.count())
        self.core = BrokerCore(
            self.specs.values(),
            self.ledger,
            new_name=lambda _pool: next(names),
            config=self.config,
        )
        self.now = 0.0
        self.job_ids = itertools.count()
        self.pods: dict[str, ModelPod] = {}
        self.tickets: dict[str, Ticket] = {}
        self.queued: set[str] = set()
        self.leases: dict[str, Lease] = {}
        self.committed: set[str] = set()
        self.launched: set[str] = set()
        self.card: dict[str, str] = {}  # group -> job whose processes may still be on it
        self.deleting: list[str] = []
        self.never_again: set[str] = set()  # retired, unclean or boundary-crossed pods
        self.judged: dict[str, bool] = {}  # launched jobs judged before their reset: fails
        self.verdicts: dict[tuple[str, int], int] = {}  # verdicts recorded per attempt
        for pool in self.specs:  # the floors, ready at the start
            self.reconcile(pool)
        self.ready(255)

    # ------------------------------------------------------------------ executing actions

    def act(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, CreatePod):
                order = action.order
                assert order.pod not in self.pods
                self.pods[order.pod] = ModelPod(
                    order.pool, order.role, order.group, order.single_use or bool(order.image)
                )
            elif isinstance(action, DeletePod):
                pod = self.pods[action.pod]
                assert pod.job is None, f"{action.pod} deleted while leased to {pod.job}"
                pod.retiring = True
                self.never_again.add(action.pod)
                if action.pod not in self.deleting:
                    self.deleting.append(action.pod)
            elif isinstance(action, StartAttempt):
                self._claimed(action.lease)
            elif isinstance(action, LaunchAttempt):
                self._launched(action.job)
            elif isinstance(action, HoldPod):
                self.pods[action.pod].hold_until = action.until
            elif isinstance(action, RecordVerdict):
                ticket = action.ticket
                attempt = (ticket.job, ticket.retries)
                self.verdicts[attempt] = self.verdicts.get(attempt, 0) + 1
                assert self.verdicts[attempt] == 1, f"{attempt} judged twice"
                state = action.verdict.state
                if state is JobState.QUEUED:
                    ticket = Ticket(ticket.job, ticket.caller, ticket.spec, ticket.submitted_at,
                                    ticket.retries + 1)
                    self.tickets[ticket.job] = ticket
                    self.queued.add(ticket.job)
                self.act(self.core.verdict_recorded(ticket, state, self.now))

    def _claimed(self, lease: Lease) -> None:
        job = lease.job
        ticket = self.tickets[job]
        spec = ticket.spec
        assert job in self.queued and job not in self.leases
        names = [p.name for p in lease.pods]
        assert len(names) == spec.pods == len(set(names))  # invariant 1: all, distinct
        session = (ticket.caller, spec.queue, spec.lease_tag)
        for name in names:
            pod = self.pods[name]
            assert pod.ready and pod.job is None and not pod.retiring, (name, pod)
            assert name not in self.never_again, name  # invariants 2 and 5
            assert pod.pool == spec.pool
            if pod.owner is not None:
                assert pod.owner[0] == ticket.caller, (name, pod.owner)  # owner-only reuse
                crossed = pod.owner[1] != spec.queue or (
                    self.mode is LeaseTagMode.BOUNDARY and pod.owner[2] != spec.lease_tag
                )
                pod.retire_after_job = crossed
            pod.job = job
            pod.claims.append(job)
            pod.owner = session
        if spec.pool == "gpu":
            groups = [self.pods[n].group for n in names]
            assert len(set(groups)) == len(groups)  # distinct physical GPUs
        self.queued.discard(job)
        self.leases[job] = lease

    def _launched(self, job: str) -> None:
        assert job in self.committed, f"{job} launched before its commit"  # invariant 3
        assert job not in self.launched
        for p in self.leases[job].pods:
            group = self.pods[p.name].group
            if group is not None:
                holder = self.card.get(group)
                assert holder is None or holder == job, (group, holder)  # invariant 6
                self.card[group] = job
        self.launched.add(job)

    # ------------------------------------------------------------------ events

    @rule(
        caller=st.sampled_from(["alice", "bob", "carol"]),
        pool=st.sampled_from(["cpu", "gpu"]),
        queue=st.sampled_from(["q1", "q2"]),
        tag=st.sampled_from(["t1", "t2", "t3"]),
        pods=st.integers(1, 2),
        single_use=st.sampled_from([False, False, False, True]),
        retries=st.integers(0, 1),
    )
    def submit(self, caller: str, pool: str, queue: str, tag: str, pods: int,
               single_use: bool, retries: int) -> None:
        job = f"job-{next(self.job_ids)}"
        spec = JobSpec(pool=pool, command=["x"], queue=queue, lease_tag=tag, pods=pods,
                       single_use=single_use, max_retries=retries)
        ticket = Ticket(job, caller, spec, self.now)
        self.tickets[job] = ticket
        self.queued.add(job)
        self.core.submit(ticket, self.now)

    @rule(pool=st.sampled_from(["cpu", "gpu"]))
    def reconcile(self, pool: str) -> None:
        self.act(self.core.reconcile(pool, self.now))

    @rule(mask=st.integers(0, 255))
    def ready(self, mask: int) -> None:
        starting = [n for n, p in self.pods.items() if not p.ready and not p.retiring]
        for k, name in enumerate(starting):
            if mask >> (k % 8) & 1 or k >= 8:
                self.pods[name].ready = True
                self.act(self.core.pod_ready(name, self.now))

    @precondition(lambda self: bool(self.queued))
    @rule()
    def dispatch(self) -> None:
        self.act(self.core.dispatch(self.now))
        for job in sorted(self.queued):
            self._check_nothing_left_for(job)

    def _check_nothing_left_for(self, job: str) -> None:
        """Liveness: the model knows no pod this waiting job could have taken."""
        ticket = self.tickets[job]
        spec = ticket.spec
        if spec.pods != 1 or spec.single_use:
            return
        reserved = self.core.reservations and self.core.reservations.holder(spec.pool)
        if reserved and reserved.job != job:
            return  # an older gang keeps the pool's free pods (control/reservations.py)
        if spec.pool == "cpu":
            leased = sum(
                len(lease.pods) for lease in self.leases.values()
                if lease.pool == "cpu" and self.tickets[lease.job].caller == ticket.caller
            )
            if leased + 1 > CPU_CALLER_LIMIT:
                return
        session = (ticket.caller, spec.queue, spec.lease_tag)
        for old in self.judged:
            for p in self.leases[old].pods:
                pod = self.pods[p.name]
                if pod.owner == session and not pod.retire_after_job and not pod.dedicated:
                    return  # its session's pod comes back held once reset: it waits for it
        for name, pod in self.pods.items():
            if pod.pool != spec.pool or not pod.ready or pod.retiring or pod.job is not None:
                continue
            if pod.dedicated or pod.role is PodRole.STANDBY:
                continue
            if pod.group is not None and self._card_blocked(pod.group, job):
                continue  # its card is busy, claimed or not yet clean: the gate decides
            own = pod.owner is not None and pod.owner[0] == ticket.caller
            if pod.owner is None or (own and pod.hold_until > self.now):
                raise AssertionError(f"{job} waits while {name} is free for it: {pod}")

    @precondition(lambda self: bool(set(self.leases) - self.committed))
    @rule(i=st.integers(0, 50), wins=st.booleans())
    def commit(self, i: int, wins: bool) -> None:
        pending = sorted(set(self.leases) - self.committed)
        job = pending[i % len(pending)]
        if wins:
            self.committed.add(job)
            self.act(self.core.committed(job, self.now))
            return
        lease = self.leases.pop(job)
        for p in lease.pods:  # the pods go back exactly as they were before the claim
            pod = self.pods[p.name]
            pod.job = None
            pod.claims.pop()
            pod.retire_after_job = False
            pod.owner = self._owner_before(p.name)
        self.queued.add(job)  # the driver re-reads the store; the job is queued again
        self.act(self.core.commit_lost(job, self.now))
        self.core.submit(self.tickets[job], self.now)

    def _owner_before(self, name: str) -> tuple[str, str, str] | None:
        """The session of the pod's last finished job, from the model's own history."""
        for job in reversed(self.pods[name].claims):
            if job not in self.leases and job in self.tickets:
                t = self.tickets[job]
                return (t.caller, t.spec.queue, t.spec.lease_tag)
        return None

    def _card_blocked(self, group: str, job: str) -> bool:
        """The card may not run `job` now: another job runs or claimed a pod on it, or a pod
        on it was released unclean and is not deleted yet."""
        if self.card.get(group) not in (None, job):
            return True
        return any(
            p.group == group and (p.unclean or p.job not in (None, job))
            for p in self.pods.values()
        )

    @invariant()
    def committed_attempts_on_free_cards_are_launched(self) -> None:
        for job in self.committed & set(self.leases):
            if job in self.launched:
                continue
            groups = {self.pods[p.name].group for p in self.leases[job].pods}
            assert not all(g is None or not self._card_blocked(g, job) for g in groups), (
                f"{job} is committed and its cards are free, but it was not launched"
            )

    @precondition(lambda self: bool(self.launched - set(self.judged)))
    @rule(i=st.integers(0, 50), fails=st.booleans())
    def judged_before_reset(self, i: int, fails: bool) -> None:
        """Every rank exited and the output is stored: the driver asks for the verdict before
        the reset; the attempt's `attempt_over` comes later, with the same end."""
        jobs = sorted(self.launched - set(self.judged))
        job = jobs[i % len(jobs)]
        self.judged[job] = fails
        self.act(self.core.judge_before_reset(job, AttemptEnd(exit_code=int(fails)), self.now))

    @precondition(lambda self: bool(self.leases))
    @rule(i=st.integers(0, 50), unclean_mask=st.integers(0, 3), fails=st.booleans())
    def attempt_over(self, i: int, unclean_mask: int, fails: bool) -> None:
        jobs = sorted(self.leases)
        job = jobs[i % len(jobs)]
        fails = self.judged.pop(job, fails)
        lease = self.leases.pop(job)
        unclean = [p.name for k, p in enumerate(lease.pods) if unclean_mask >> k & 1]
        for p in lease.pods:
            pod = self.pods[p.name]
            pod.job = None
            pod.unclean = p.name in unclean
            if p.name in unclean or pod.retire_after_job:
                self.never_again.add(p.name)
            group = pod.group
            if group is not None and self.card.get(group) == job and p.name not in unclean:
                del self.card[group]  # an unclean pod keeps its card until it is deleted
        self.committed.discard(job)
        self.launched.discard(job)
        end = AttemptEnd(exit_code=1 if fails else 0)
        actions = self.core.attempt_over(job, end, unclean, self.now)
        ticket = self.tickets[job]
        assert self.verdicts.get((job, ticket.retries)) == 1 or any(
            isinstance(a, RecordVerdict) for a in actions
        ), f"{job}'s attempt ended without a verdict"
        self.act(actions)  # its verdict is stored in there: pods held back for it go then
        for name in unclean:  # invariant 5
            assert name in self.deleting, f"unclean {name} was not retired"

    @precondition(lambda self: bool(self.deleting))
    @rule(i=st.integers(0, 50))
    def deleted(self, i: int) -> None:
        name = self.deleting.pop(i % len(self.deleting))
        pod = self.pods.pop(name)
        if pod.unclean and pod.group is not None and pod.claims and (
            self.card.get(pod.group) == pod.claims[-1]
        ):
            del self.card[pod.group]  # its last job's processes are surely gone now
        self.act(self.core.pod_deleted(name, self.now))

    @rule(dt=st.sampled_from([0.5, 3.0, 11.0, 20.0]))
    def tick(self, dt: float) -> None:
        self.now += dt
        self.act(self.core.tick(self.now))

    # ------------------------------------------------------------------ safety checks

    @invariant()
    def indexes_agree(self) -> None:
        self.core.tracker.check_invariants()

    @invariant()
    def budgets_and_ceilings_hold(self) -> None:  # invariant 4, counted by the model
        cpu = [p for p in self.pods.values() if p.pool == "cpu"]
        cards = {p.group for p in self.pods.values() if p.pool == "gpu"}
        assert len(cpu) <= min(LIMITS["cpu"], self.specs["cpu"].max_count)
        assert len(cards) <= min(LIMITS["H200"], self.specs["gpu"].max_count)
        for resource, limit in LIMITS.items():
            assert self.ledger.used(resource) <= limit

    @invariant()
    def one_job_per_card(self) -> None:  # invariant 6, from the launches the core ordered
        running: dict[str, set[str]] = {}
        for job in self.launched:
            for p in self.leases[job].pods:
                group = self.pods[p.name].group
                if group is not None:
                    running.setdefault(group, set()).add(job)
        assert all(len(jobs) == 1 for jobs in running.values()), running


class HintMachine(CoreMachine):
    mode = LeaseTagMode.HINT


class ReservingMachine(CoreMachine):
    """The same invariants with gang reservations on (short bounds, so they lapse too)."""

    config = CoreConfig(elastic=None, check_skips=True,
                        gang_reservations=ReservationRules(hold_s=8.0, rest_s=4.0))


_settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBoundaryMode = CoreMachine.TestCase
TestBoundaryMode.settings = _settings
TestHintMode = HintMachine.TestCase
TestHintMode.settings = _settings
TestWithGangReservations = ReservingMachine.TestCase
TestWithGangReservations.settings = _settings

"""DESIGN.md invariants 1, 2, 4, 5 and 6 under random interleavings (Hypothesis stateful).

A small driver executes the control plane's decisions the way the service does (scaler plan
-> admission through the ledger -> pods created, ready, claimed, launched, released clean or
unclean, deleted; holds expiring as time passes; commits failing) while the machine checks,
after every step, that:
1. a pod is leased to at most one job, and a multi-pod claim takes all its pods or none;
2. a used pod never serves another caller, and across a tag or queue boundary it serves one
   job and retires;
4. budgets and pool ceilings, counted in physical GPUs or pods, are never exceeded;
5. a pod whose reset was not confirmed clean is never claimed again;
6. at most one job runs per physical GPU, and a standby runs only after the card's previous
   job is gone.
"""

from __future__ import annotations

import itertools
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from firepool.control.admission import admit
from firepool.control.budgets import BudgetLedger
from firepool.control.records import ClaimRequest, Lease
from firepool.control.scaler import QueuedDemand, plan
from firepool.control.tracker import Tracker
from firepool.model import LeaseTagMode, PodState, PoolSpec

EXAMPLES = 500 if os.environ.get("CI") == "true" else 120
LIMITS = {"H200": 3, "cpu": 4}


def pools(mode: LeaseTagMode) -> list[PoolSpec]:
    return [
        PoolSpec(
            name="cpu",
            max_count=5,
            min_count=1,
            max_idle_count=1,
            idle_timeout=15,
            step=2,
            lease_tag_mode=mode,
            max_pods_per_caller=3,
        ),
        PoolSpec(
            name="gpu",
            accelerator="H200",
            accelerators_per_pod=1,
            standbys_per_active=2,
            max_count=4,
            min_count=1,
            idle_timeout=15,
            caller_hold_seconds=10,
            step=2,
            lease_tag_mode=mode,
        ),
    ]


class BrokerMachine(RuleBasedStateMachine):
    mode = LeaseTagMode.BOUNDARY

    def __init__(self) -> None:
        super().__init__()
        self.specs = {p.name: p for p in pools(self.mode)}
        self.tracker = Tracker(self.specs.values())
        self.ledger = BudgetLedger(LIMITS)
        self.now = 0.0
        self.names = (f"pod-{i}" for i in itertools.count())
        self.job_ids = itertools.count()
        self.queued: list[ClaimRequest] = []
        self.requests: dict[str, ClaimRequest] = {}
        self.leases: dict[str, Lease] = {}
        self.launched: set[str] = set()
        self.last_session: dict[str, tuple[str, str, str]] = {}  # pod -> caller, queue, tag
        self.retire_after_job: set[str] = set()
        self.must_not_serve: set[str] = set()  # retired, unclean or boundary-crossed pods
        self.gpu_running: dict[str, str] = {}  # group -> job running on the card
        self.unclean_held_gate: set[str] = set()
        for pool in self.specs:  # the floors, ready at the start
            self.reconcile(pool)
        self.ready(255)

    # ------------------------------------------------------------------ events

    @rule(
        caller=st.sampled_from(["alice", "bob", "carol"]),
        pool=st.sampled_from(["cpu", "gpu"]),
        queue=st.sampled_from(["q1", "q2"]),
        tag=st.sampled_from(["t1", "t2", "t3"]),
        pods=st.integers(1, 2),
        single_use=st.sampled_from([False, False, False, True]),
    )
    def submit(
        self, caller: str, pool: str, queue: str, tag: str, pods: int, single_use: bool
    ) -> None:
        job = f"job-{next(self.job_ids)}"
        req = ClaimRequest(job, caller, pool, queue, tag, pods, single_use, queued_at=self.now)
        self.requests[job] = req
        self.queued.append(req)

    @rule(pool=st.sampled_from(["cpu", "gpu"]))
    def reconcile(self, pool: str) -> None:
        spec = self.specs[pool]
        demand = [
            QueuedDemand(q.caller, q.pods, q.single_use) for q in self.queued if q.pool == pool
        ]
        headroom = self.ledger.headroom(spec.budget_resource)
        p = plan(
            spec,
            self.tracker.pool_pods(pool),
            self.tracker.pool_groups(pool),
            demand,
            self.now,
            headroom_units=headroom,
        )
        for order in admit(p, spec, self.ledger, lambda: next(self.names)):
            self.tracker.add_pod(
                order.pod,
                pool,
                self.now,
                role=order.role,
                group=order.group,
                single_use=order.single_use,
                image=order.image,
            )
        for retired in p.retire:
            if self.tracker.retire(retired.pod, retired.reason):
                self.must_not_serve.add(retired.pod)

    @rule(mask=st.integers(0, 255))
    def ready(self, mask: int) -> None:
        starting = [p.name for p in self._pods() if p.state is PodState.STARTING]
        for k, name in enumerate(starting):
            if mask >> (k % 8) & 1 or k >= 8:
                self.tracker.pod_ready(name, self.now)

    @precondition(lambda self: bool(self.queued))
    @rule(i=st.integers(0, 50), all_of_them=st.booleans())
    def dispatch(self, i: int, all_of_them: bool) -> None:
        """Try the queued jobs in order from a random one, as a dispatcher pass would."""
        start = i % len(self.queued)
        order = self.queued[start:] + self.queued[:start]
        for req in order if all_of_them else order[:1]:
            self._claim(req)

    def _claim(self, req: ClaimRequest) -> None:
        before = {p.name: p.state for p in self._pods()}
        got = self.tracker.claim(req, self.now)
        if not isinstance(got, Lease):
            assert {p.name: p.state for p in self._pods()} == before  # nothing taken
            return
        self.queued.remove(req)
        names = [p.name for p in got.pods]
        assert len(names) == req.pods == len(set(names))  # invariant 1: all, distinct
        groups = [self.tracker.get(n).group for n in names]  # type: ignore[union-attr]
        if req.pool == "gpu":
            assert len(set(groups)) == len(groups)  # distinct physical GPUs
        for name in names:
            assert name not in self.must_not_serve, name  # invariants 2 and 5
            last = self.last_session.get(name)
            if last is not None:
                assert last[0] == req.caller  # invariant 2: owner-only reuse
                crossed = last[1] != req.queue or (
                    self.mode is LeaseTagMode.BOUNDARY and last[2] != req.tag
                )
                if crossed:
                    self.retire_after_job.add(name)
            self.last_session[name] = (req.caller, req.queue, req.tag)
        self.leases[req.job] = got

    @precondition(lambda self: bool(self.leases))
    @rule()
    def launch(self) -> None:
        ready = [
            j
            for j, lease in self.leases.items()
            if j not in self.launched
            and not any(
                self.tracker.get(p.name).gated
                for p in lease.pods  # type: ignore[union-attr]
            )
        ]
        for job in ready:
            self._launch(job)

    def _launch(self, job: str) -> None:
        for p in self.leases[job].pods:
            group = self.tracker.get(p.name).group  # type: ignore[union-attr]
            if group is not None:
                assert group not in self.gpu_running, (group, self.gpu_running)  # invariant 6
                self.gpu_running[group] = job
            self.tracker.mark_running(p.name)
        self.launched.add(job)

    @precondition(lambda self: bool(self.leases))
    @rule(i=st.integers(0, 50), unclean_mask=st.integers(0, 3), launched_only=st.booleans())
    def release(self, i: int, unclean_mask: int, launched_only: bool) -> None:
        jobs = [j for j in self.leases if j in self.launched or not launched_only]
        if not jobs:
            return
        job = jobs[i % len(jobs)]
        lease = self.leases.pop(job)
        unclean = [p.name for k, p in enumerate(lease.pods) if unclean_mask >> k & 1]
        result = self.tracker.release(job, self.now, unclean=unclean)
        retired = {r.pod for r in result.retired}
        for p in lease.pods:
            pod = self.tracker.get(p.name)
            assert pod is not None
            if p.name in unclean or p.name in self.retire_after_job:
                assert p.name in retired, p.name
                self.must_not_serve.add(p.name)
            if p.name in retired:
                self.must_not_serve.add(p.name)
            group = pod.group
            if group is not None and self.gpu_running.get(group) == job:
                if p.name in unclean:
                    self.unclean_held_gate.add(p.name)  # the card is free only at deletion
                else:
                    del self.gpu_running[group]
        self.launched.discard(job)

    @precondition(lambda self: bool(self.leases))
    @rule(i=st.integers(0, 50))
    def commit_fails(self, i: int) -> None:
        pending = [j for j in self.leases if j not in self.launched]
        if not pending:
            return
        job = pending[i % len(pending)]
        lease = self.leases.pop(job)
        self.tracker.unclaim(job)
        for p in lease.pods:
            self.retire_after_job.discard(p.name)
        self.queued.append(self.requests[job])
        # The claimed pods' session records are restored by the tracker, not by us.
        for p in lease.pods:
            pod = self.tracker.get(p.name)
            assert pod is not None
            if pod.used and pod.owner is not None:
                self.last_session[p.name] = (pod.owner, pod.queue or "", pod.tag or "")
            else:
                self.last_session.pop(p.name, None)

    @rule(i=st.integers(0, 50))
    def delete(self, i: int) -> None:
        retiring = [p.name for p in self._pods() if p.state is PodState.RETIRING]
        if not retiring:
            return
        name = retiring[i % len(retiring)]
        group = self.tracker.get(name).group  # type: ignore[union-attr]
        freed, _promoted = self.tracker.pod_deleted(name)
        if name in self.unclean_held_gate:
            self.unclean_held_gate.discard(name)
            assert group is not None
            self.gpu_running.pop(group, None)
        if freed is not None:
            self.ledger.release(freed)

    @rule(dt=st.sampled_from([0.5, 3.0, 11.0, 20.0]))
    def tick(self, dt: float) -> None:
        self.now += dt
        for retired in self.tracker.expire_holds(self.now):
            self.must_not_serve.add(retired.pod)

    # ------------------------------------------------------------------ checks

    @invariant()
    def indexes_agree(self) -> None:
        self.tracker.check_invariants()

    @invariant()
    def budgets_and_ceilings_hold(self) -> None:  # invariant 4
        for resource, limit in LIMITS.items():
            assert self.ledger.used(resource) <= limit
        assert len(self.tracker.pool_pods("cpu")) <= self.specs["cpu"].max_count
        assert len(self.tracker.pool_groups("gpu")) <= self.specs["gpu"].max_count
        assert len(self.tracker.pool_groups("gpu")) == self.ledger.used("H200")
        assert len(self.tracker.pool_pods("cpu")) == self.ledger.used("cpu")

    @invariant()
    def one_running_job_per_gpu(self) -> None:  # invariant 6
        for group in self.tracker.pool_groups("gpu"):
            running = [
                n
                for n in group.pods
                if self.tracker.get(n).state is PodState.RUNNING  # type: ignore[union-attr]
            ]
            assert len(running) <= 1

    def _pods(self) -> list:  # type: ignore[type-arg]
        return self.tracker.pool_pods("cpu") + self.tracker.pool_pods("gpu")


class HintMachine(BrokerMachine):
    mode = LeaseTagMode.HINT


_settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBoundaryMode = BrokerMachine.TestCase
TestBoundaryMode.settings = _settings
TestHintMode = HintMachine.TestCase
TestHintMode.settings = _settings

"""The read models: the broker's live state as the API's listings, the dashboard and
/metrics read it (the hooks' `ReadModels` and `PodAccess` reads, `api/hooks.py`).

Reads only, on the event loop's thread and without the store: a scrape or a listing is
O(pods) and never waits on I/O. Nothing here changes the core or the pods.
"""

from __future__ import annotations

import collections
import hmac
from collections.abc import Callable, Mapping

from prometheus_client.registry import Collector

from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore
from firepool.control.rollout import RolloutProgress
from firepool.model import PodInfo, PodState, PoolStats, RoundAllocation, TimelinePoint
from firepool.service.attempt import Running
from firepool.service.pods import PodManager
from firepool.service.telemetry import BrokerTelemetry, HeldClock, held_counts

#: Pod states in which a job holds the pod (the dashboard's busy capacity).
_BUSY_STATES = frozenset({PodState.ASSIGNED, PodState.RUNNING})


class BrokerViews:
    def __init__(
        self,
        *,
        core: BrokerCore,
        ledger: BudgetLedger,
        pods: PodManager,
        running: Mapping[str, Running],
        telemetry: BrokerTelemetry,
        clock: Callable[[], float],
    ) -> None:
        self.core = core
        self.ledger = ledger
        self.pods = pods
        self.running = running
        self.telemetry = telemetry
        self.clock = clock
        self._held = HeldClock(clock())

    # ------------------------------------------------------------------ pods' own reads

    def pod_for_secret(self, token: str, pod: str | None) -> str | None:
        records = self.pods.records
        for name in [pod] if pod is not None else list(records):
            record = records.get(name)
            if record is not None and hmac.compare_digest(record.secret, token):
                return name
        return None

    def pod_may_fetch(self, pod: str, digest: str) -> bool:
        tracked = self.core.tracker.get(pod)
        running = self.running.get(tracked.job) if tracked is not None and tracked.job else None
        return running is not None and running.job.spec.package == digest

    # ------------------------------------------------------------------ listings, dashboard

    def pod_list(self) -> list[PodInfo]:
        records = self.pods.records
        out: list[PodInfo] = []
        for spec in self.core.specs.values():
            for pod in self.core.tracker.pool_pods(spec.name):
                record = records.get(pod.name)
                out.append(
                    PodInfo(
                        name=pod.name,
                        pool=pod.pool,
                        role=pod.role.value,
                        state=pod.state.value,
                        owner=pod.owner,
                        queue=pod.queue,
                        tag=pod.tag,
                        group=pod.group,
                        job=pod.job,
                        hold_until=pod.hold_until,
                        created_at=pod.created_at,
                        isolation=record.isolation if record is not None else "",
                        image=pod.image,
                        pid_namespace=record.pid_namespace if record is not None else None,
                        network=record.network if record is not None else "",
                    )
                )
        return out

    def pool_stats(self) -> list[PoolStats]:
        """Each pool's figures for a scrape: O(pods), read on the event loop's thread."""
        now = self.clock()
        queued: dict[str, int] = {}
        for entry in self.core.queued.values():
            pool = entry.ticket.spec.pool
            queued[pool] = queued.get(pool, 0) + 1
        ledger = self.ledger
        out: list[PoolStats] = []
        for spec in self.core.specs.values():
            pool_pods = self.core.tracker.pool_pods(spec.name)
            kinds = collections.Counter([(pod.role, pod.state) for pod in pool_pods])
            pods = {(role.value, state.value): n for (role, state), n in kinds.items()}
            count, gpus = held_counts(spec, [pod.group for pod in pool_pods])
            pod_s, gpu_s = self._held.accrue(spec.name, now, count, gpus)
            resource = spec.budget_resource
            out.append(
                PoolStats(
                    pool=spec.name,
                    floor=spec.min_count,
                    idle_cap=spec.max_idle_count,
                    ceiling=spec.max_count,
                    pods=pods,
                    held_pod_seconds=pod_s,
                    held_gpu_seconds=gpu_s,
                    queued=queued.get(spec.name, 0),
                    budget_resource=resource,
                    budget_used=ledger.used(resource),
                    budget_limit=ledger.limit(resource),
                )
            )
        return out

    def metric_collectors(self) -> list[Collector]:
        return self.telemetry.collectors()

    def timeline(self) -> list[TimelinePoint]:
        return list(self.telemetry.timeline.points)

    def sample_timeline(self) -> None:
        """One sample of held vs busy pods over every pool (and the interval's start
        latencies) for the dashboard's plots."""
        held = busy = 0
        for spec in self.core.specs.values():
            for pod in self.core.tracker.pool_pods(spec.name):
                held += 1
                busy += pod.state in _BUSY_STATES
        self.telemetry.timeline.sample(self.clock(), held, busy)

    def round_allocations(self) -> list[RoundAllocation]:
        elastic = self.core.elastic
        return [] if elastic is None else list(elastic.allocations)

    def rollouts(self) -> list[RolloutProgress]:
        return [self.core.rollout(name) for name in self.core.specs]

"""How the API and the rest of the broker talk: the hooks a broker attaches to `create_app`.

The API only records intent durably; acting on it is the broker's job. After a job is
committed as QUEUED the API calls `job_submitted` (the dispatcher wakes instead of waiting for
its fallback tick); after a running job is marked `cancel_requested` it calls
`cancel_requested` (the broker stops the attempt and finishes the job as CANCELLED), and it
calls it too when a queued job was cancelled outright, so the broker forgets it at once.
The routes that need the broker's live state ask through the same object, each through the
small Protocol of its own concern: `PodAccess` (agents' exit events, which pod a pod secret
belongs to, package fetches), `ReadModels` (pod list, pool figures, metrics, timeline,
rounds, rollouts), `PoolAdmin` (pool edits) and `ProgressReports` (elastic progress);
`JobSignals` carries the job lifecycle. `BrokerHooks` is all of them together.

The other way: whoever commits a job's terminal state calls `job_finished` right after the
commit (the service after a verdict or a queued job's failure, the API after cancelling a
queued job), and the hooks hand the record to every listener `create_app` subscribed with
`subscribe_finished`: the API's long-poll waiters (`GET /v1/jobs/{id}?wait_s=N`), which then
answer at once instead of the caller polling.
Hooks run on the event loop or a request thread and must only signal or read, never block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prometheus_client.registry import Collector

from firepool.control.rollout import RolloutProgress
from firepool.model import (
    NotFoundError,
    PodInfo,
    PoolSpec,
    PoolStats,
    RoundAllocation,
    TimelinePoint,
    UnavailableError,
)
from firepool.protocol import ExitEvent
from firepool.store import JobRecord

FinishedListener = Callable[[JobRecord], None]


class JobSignals(Protocol):
    """Job lifecycle, both ways: the API's job service signals submissions and cancels; the
    long-poll waiters hear of terminal states."""

    def job_submitted(self, job: JobRecord) -> None: ...

    def cancel_requested(self, job: JobRecord) -> None: ...

    def job_finished(self, job: JobRecord) -> None: ...

    def subscribe_finished(self, listener: FinishedListener) -> None: ...


class PodAccess(Protocol):
    """What the pod agents' internal routes ask: whose secret a token is, whether a pod may
    fetch a package, and where an exit event goes."""

    def exit_event(self, event: ExitEvent) -> bool:
        """An agent's exit event; False when no live attempt matches it."""
        ...

    def pod_for_secret(self, token: str, pod: str | None) -> str | None:
        """The pod (`pod`, or any pod when None) whose agent secret `token` is, or None."""
        ...

    def pod_may_fetch(self, pod: str, digest: str) -> bool:
        """Whether the attempt leased to `pod` runs the package `digest` (a pod fetches its
        own job's code, never another caller's)."""
        ...


class ReadModels(Protocol):
    """The broker's live state as the listings, the dashboard and /metrics read it (reads
    only, no store access)."""

    def pod_list(self) -> list[PodInfo]: ...

    def pool_stats(self) -> list[PoolStats]:
        """Each pool's live figures, read at every scrape of /metrics (no store access)."""
        ...

    def metric_collectors(self) -> list[Collector]:
        """The broker's own counters and histograms, registered once in the app's registry."""
        ...

    def timeline(self) -> list[TimelinePoint]:
        """The dashboard's samples of held vs busy pods and start latency, oldest first."""
        ...

    def round_allocations(self) -> list[RoundAllocation]:
        """The latest elastic rounds' allocations, oldest first (empty: no rounds)."""
        ...

    def rollouts(self) -> list[RolloutProgress]:
        """Each pool's rollout progress."""
        ...


class PoolAdmin(Protocol):
    """An admin's pool edits (`PUT /v1/pools/{name}`)."""

    async def apply_pool(self, spec: PoolSpec) -> PoolSpec:
        """An admin's edit of a pool: the spec the broker runs from now on (a changed
        template rolls the pool's pods over), kept in the store so a restart runs it too.
        Raises a typed error and changes nothing when the edit (or its store write) is
        refused."""
        ...


class ProgressReports(Protocol):
    """Elastic attempts' progress reports: their token check and the report itself."""

    def progress_token_ok(self, attempt: str, token: str) -> bool: ...

    def progress(
        self, job_id: str, attempt: str, *, samples_per_s: float | None, fraction: float | None
    ) -> bool:
        """An elastic attempt's progress; False for a stale attempt's report."""
        ...


class BrokerHooks(JobSignals, PodAccess, ReadModels, PoolAdmin, ProgressReports, Protocol):
    """Everything a broker attaches to `create_app`; each route depends only on the small
    Protocol above it needs (`ApiContext` hands out each)."""


class NoHooks:
    """The default when no broker is attached (an API-only process, tests): terminal states
    committed by the API itself (a cancelled queued job) still reach its listeners."""

    def __init__(self) -> None:
        self._finished: list[FinishedListener] = []

    def job_submitted(self, job: JobRecord) -> None:
        return None

    def cancel_requested(self, job: JobRecord) -> None:
        return None

    def job_finished(self, job: JobRecord) -> None:
        for listener in self._finished:
            listener(job)

    def subscribe_finished(self, listener: FinishedListener) -> None:
        self._finished.append(listener)

    def exit_event(self, event: ExitEvent) -> bool:
        return False

    def pod_for_secret(self, token: str, pod: str | None) -> str | None:
        return None

    def pod_may_fetch(self, pod: str, digest: str) -> bool:
        return False

    def pod_list(self) -> list[PodInfo]:
        return []

    def pool_stats(self) -> list[PoolStats]:
        return []

    def metric_collectors(self) -> list[Collector]:
        return []

    def timeline(self) -> list[TimelinePoint]:
        return []

    def round_allocations(self) -> list[RoundAllocation]:
        return []

    def progress_token_ok(self, attempt: str, token: str) -> bool:
        return False

    async def apply_pool(self, spec: PoolSpec) -> PoolSpec:
        raise UnavailableError("no broker runs behind this API: pools cannot change here")

    def rollouts(self) -> list[RolloutProgress]:
        return []

    def progress(
        self, job_id: str, attempt: str, *, samples_per_s: float | None, fraction: float | None
    ) -> bool:
        raise NotFoundError(f"job {job_id} is not an elastic job of this broker", field="job_id")

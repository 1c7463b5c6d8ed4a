"""`JobStore`: the durable store as the service and the simulator see it.

Every state change is a compare-and-set against a record the caller read: the write succeeds
only if the job row still carries that record's version, and otherwise raises
`LostRaceError` (someone else moved the job) without touching anything. Methods are
synchronous and thread-safe; an asyncio driver calls them through a worker thread.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol, runtime_checkable

from firepool.model import (
    JobErrorClass,
    JobSpec,
    JobState,
    PoolSpec,
    Principal,
    TokenRole,
)
from firepool.store.records import (
    AttemptRecord,
    JobRecord,
    PackageRecord,
    PodBinding,
    PoolEdit,
    Submitted,
)


class JobStore(Protocol):
    # ---------------------------------------------------------------- jobs
    def submit(self, caller: str, spec: JobSpec, *, now: float) -> Submitted:
        """Record a new QUEUED job. A repeated `spec.request_id` of the same caller returns the
        earlier job (`created=False`); the same id with a different spec is a `ConflictError`."""
        ...

    def get(self, job_id: str) -> JobRecord | None: ...

    def list_jobs(
        self,
        *,
        caller: str | None = None,
        states: Collection[JobState] = (),
        pool: str | None = None,
        queue: str | None = None,
        limit: int = 100,
        after: str | None = None,
        newest_first: bool = False,
    ) -> list[JobRecord]:
        """Jobs oldest first (newest first with `newest_first`: the dashboard's recent jobs),
        filtered, starting after the job `after` in that order (a page cursor; an unknown id
        yields nothing); `caller=None` means every caller (broker use only)."""
        ...

    def start(self, job: JobRecord, bindings: Sequence[PodBinding], *, now: float) -> JobRecord:
        """QUEUED -> RUNNING with a new attempt `<job-id>:<retries>` and its pod bindings, in
        one durable transaction. No user code may run before this returns."""
        ...

    def finish(
        self,
        job: JobRecord,
        state: JobState,
        *,
        now: float,
        exit_code: int | None = None,
        error_class: JobErrorClass | None = None,
        message: str | None = None,
    ) -> JobRecord:
        """Move the job to a terminal state and close its open attempt."""
        ...

    def requeue(
        self, job: JobRecord, *, now: float, error_class: JobErrorClass | None = None
    ) -> JobRecord:
        """RUNNING -> QUEUED for a retry or crash recovery; the next attempt gets retry + 1.
        An `error_class` of `Reclaimed` also raises the job's `reclaims` (no failure)."""
        ...

    def cancel(self, job_id: str, *, now: float) -> JobRecord:
        """Cancel: a PENDING or QUEUED job becomes CANCELLED at once; a RUNNING job is marked
        `cancel_requested` for the dispatcher to stop; a finished job is returned unchanged."""
        ...

    def record_timing(self, job: JobRecord, name: str, at: float) -> None:
        """Note when `started` or `first_instruction` happened (not version-checked: timings
        annotate the attempt the caller holds, they do not decide anything)."""
        ...

    def record_timings(self, job: JobRecord, stamps: Mapping[str, float]) -> None:
        """`record_timing` for several names in one write (a driver stamps `started` and
        `first_instruction` together: one commit, not two)."""
        ...

    def attempts(self, job_id: str) -> list[AttemptRecord]: ...

    # ---------------------------------------------------------------- packages
    def add_package(self, digest: str, size: int, *, caller: str, now: float) -> PackageRecord:
        """Record an uploaded package; a digest already known keeps its first record."""
        ...

    def get_package(self, digest: str) -> PackageRecord | None: ...

    # ---------------------------------------------------------------- callers
    def add_token(
        self, caller: str, token_hash: str, *, now: float, role: TokenRole = TokenRole.CALLER
    ) -> None:
        """Map a token hash to a caller and a role, creating the caller on first use."""
        ...

    def caller_for_token(self, token_hash: str) -> str | None:
        """The caller a (non-revoked) token hash belongs to, or None."""
        ...

    def principal_for_token(self, token_hash: str) -> Principal | None:
        """The caller and role of a (non-revoked) token hash, or None."""
        ...

    def revoke_token(self, token_hash: str) -> None: ...

    # ---------------------------------------------------------------- pool edits
    def save_pool_edit(self, spec: PoolSpec, *, now: float) -> PoolEdit:
        """Keep the spec an admin applied to a pool (replacing that pool's earlier edit);
        a broker applies an edit only after this returned."""
        ...

    def pool_edits(self) -> list[PoolEdit]:
        """Every pool's latest applied edit, by pool name."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncSubmit(Protocol):
    """Optional capability: a store that can await a durable submission on an event loop
    without a worker thread (the API's hot path uses it when present)."""

    async def submit_async(self, caller: str, spec: JobSpec, *, now: float) -> Submitted: ...


@runtime_checkable
class AsyncWrites(Protocol):
    """Optional capability: the attempt path's writes awaited on an event loop without a
    worker thread each (the service uses them when present); same rules as the sync ones."""

    async def start_async(
        self, job: JobRecord, bindings: Sequence[PodBinding], *, now: float
    ) -> JobRecord: ...

    async def finish_async(
        self,
        job: JobRecord,
        state: JobState,
        *,
        now: float,
        exit_code: int | None = None,
        error_class: JobErrorClass | None = None,
        message: str | None = None,
    ) -> JobRecord: ...

    async def record_timings_async(self, job: JobRecord, stamps: Mapping[str, float]) -> None: ...

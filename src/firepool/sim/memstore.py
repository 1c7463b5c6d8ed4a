"""An in-memory `JobStore` for the simulator: the same compare-and-set contract, no disk.

Implemented: submit (with request-id idempotency), get, list_jobs, start, finish, requeue,
cancel, record_timing(s), attempts, add_package, get_package, add_token, caller_for_token,
principal_for_token, revoke_token, save_pool_edit, pool_edits, close. Every state change
checks the caller's record version and raises `LostRaceError` on a mismatch, exactly as the SQL
store does, so a driver bug that would lose a race in production loses it here too. Not
thread-safe: the simulator is single-threaded.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from firepool.model import (
    ConflictError,
    InvalidTransitionError,
    JobErrorClass,
    JobSpec,
    JobState,
    LostRaceError,
    NotFoundError,
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
    check_transition,
    timings,
)

_KEEP: Any = object()


def _job(
    row: JobRecord,
    *,
    state: Any = _KEEP,
    version: Any = _KEEP,
    retries: Any = _KEEP,
    exit_code: Any = _KEEP,
    error_class: Any = _KEEP,
    message: Any = _KEEP,
    cancel_requested: Any = _KEEP,
    timings: Any = _KEEP,
    pods: Any = _KEEP,
    reclaims: Any = _KEEP,
) -> JobRecord:
    """`dataclasses.replace` for JobRecord without its per-call field introspection (several
    times faster; the store is on the simulator's per-job path)."""
    k = _KEEP
    return JobRecord(
        row.id,
        row.caller,
        row.spec,
        row.state if state is k else state,
        row.version if version is k else version,
        row.retries if retries is k else retries,
        row.exit_code if exit_code is k else exit_code,
        row.error_class if error_class is k else error_class,
        row.message if message is k else message,
        row.cancel_requested if cancel_requested is k else cancel_requested,
        row.timings if timings is k else timings,
        row.pods if pods is k else pods,
        row.reclaims if reclaims is k else reclaims,
    )


class MemStore:
    """Jobs, attempts, packages and tokens in dictionaries."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobRecord] = {}
        self._attempts: dict[str, list[AttemptRecord]] = {}
        self._requests: dict[tuple[str, str], str] = {}
        self._packages: dict[str, PackageRecord] = {}
        self._tokens: dict[str, Principal] = {}
        self._pool_edits: dict[str, PoolEdit] = {}
        self._ids = itertools.count(1)

    # ---------------------------------------------------------------- jobs
    def submit(self, caller: str, spec: JobSpec, *, now: float) -> Submitted:
        if spec.request_id is not None:
            known = self._requests.get((caller, spec.request_id))
            if known is not None:
                job = self._jobs[known]
                if job.spec != spec:
                    raise ConflictError(
                        "request_id reused with a different spec", field="request_id"
                    )
                return Submitted(job, False)
        job_id = f"j{next(self._ids)}"
        job = JobRecord(job_id, caller, spec, JobState.QUEUED, 1, timings=timings(submitted=now))
        self._jobs[job_id] = job
        self._attempts[job_id] = []
        if spec.request_id is not None:
            self._requests[(caller, spec.request_id)] = job_id
        return Submitted(job, True)

    def get(self, job_id: str) -> JobRecord | None:
        return self._jobs.get(job_id)

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
        out: list[JobRecord] = []
        # insertion order is submission order
        rows = iter(reversed(self._jobs.values()) if newest_first else self._jobs.values())
        if after is not None:
            if after not in self._jobs:
                return []  # an unknown cursor yields nothing, as in the SQL store
            for job in rows:
                if job.id == after:
                    break
        for job in rows:
            if caller is not None and job.caller != caller:
                continue
            if states and job.state not in states:
                continue
            if pool is not None and job.spec.pool != pool:
                continue
            if queue is not None and job.spec.queue != queue:
                continue
            out.append(job)
            if len(out) >= limit:
                break
        return out

    def _current(self, job: JobRecord) -> JobRecord:
        row = self._jobs.get(job.id)
        if row is None:
            raise NotFoundError(f"job {job.id} not found", field="job")
        if row.version != job.version:
            raise LostRaceError(
                f"job {job.id} changed under this write: expected version {job.version}, "
                f"found version {row.version} in state {row.state}",
                field="version",
            )
        return row

    def start(self, job: JobRecord, bindings: Sequence[PodBinding], *, now: float) -> JobRecord:
        check_transition(job, JobState.RUNNING)
        row = self._current(job)
        pool = row.spec.pool
        bindings = [b if b.pool else PodBinding(b.rank, b.pod, b.acquisition, b.reason, pool)
                    for b in bindings]
        new = _job(
            row,
            state=JobState.RUNNING,
            version=row.version + 1,
            pods=tuple(bindings),
            timings=timings(row.timings, assigned=now),
        )
        self._jobs[job.id] = new
        self._attempts[job.id].append(
            AttemptRecord(
                new.attempt,
                job.id,
                new.retries,
                JobState.RUNNING,
                now,
                None,
                None,
                None,
                tuple(bindings),
            )
        )
        return new

    def _close_attempt(
        self,
        job: JobRecord,
        state: JobState,
        now: float,
        exit_code: int | None,
        error: JobErrorClass | None,
    ) -> None:
        attempts = self._attempts[job.id]
        if attempts and attempts[-1].finished_at is None:
            last = attempts[-1]  # built directly: dataclasses.replace introspects every call
            attempts[-1] = AttemptRecord(
                last.id, last.job_id, last.retry, state, last.started_at, now, exit_code, error,
                last.pods,
            )

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
        if not state.terminal:
            raise InvalidTransitionError(f"{state.value} is not a terminal state", field="state")
        check_transition(job, state)
        row = self._current(job)
        new = _job(
            row,
            state=state,
            version=row.version + 1,
            exit_code=exit_code,
            error_class=error_class,
            message=message,
            timings=timings(row.timings, finished=now),
        )
        self._jobs[job.id] = new
        self._close_attempt(new, state, now, exit_code, error_class)
        return new

    def requeue(
        self, job: JobRecord, *, now: float, error_class: JobErrorClass | None = None
    ) -> JobRecord:
        check_transition(job, JobState.QUEUED)
        row = self._current(job)
        self._close_attempt(row, JobState.FAILED, now, None, error_class)
        new = _job(
            row,
            state=JobState.QUEUED,
            version=row.version + 1,
            retries=row.retries + 1,
            timings=timings(submitted=row.timings.get("submitted")),
            pods=(),
            reclaims=row.reclaims + (error_class is JobErrorClass.RECLAIMED),
        )
        self._jobs[job.id] = new
        return new

    def cancel(self, job_id: str, *, now: float) -> JobRecord:
        row = self._jobs.get(job_id)
        if row is None:
            raise NotFoundError(f"job {job_id} not found", field="job")
        if row.state.terminal or (row.state is JobState.RUNNING and row.cancel_requested):
            return row  # a repeated cancel changes nothing
        if row.state is JobState.RUNNING:
            new = _job(row, cancel_requested=True, version=row.version + 1)
        else:
            new = _job(
                row,
                state=JobState.CANCELLED,
                version=row.version + 1,
                error_class=JobErrorClass.CANCELLED,
                timings=timings(row.timings, finished=now),
            )
        self._jobs[job_id] = new
        return new

    def record_timing(self, job: JobRecord, name: str, at: float) -> None:
        self.record_timings(job, {name: at})

    def record_timings(self, job: JobRecord, stamps: Mapping[str, float]) -> None:
        row = self._jobs.get(job.id)
        if row is not None:
            changed = timings(row.timings, **stamps)
            self._jobs[job.id] = _job(row, timings=changed)

    def attempts(self, job_id: str) -> list[AttemptRecord]:
        return list(self._attempts.get(job_id, ()))

    # ---------------------------------------------------------------- packages
    def add_package(self, digest: str, size: int, *, caller: str, now: float) -> PackageRecord:
        known = self._packages.get(digest)
        if known is None:
            known = self._packages[digest] = PackageRecord(digest, size, now, caller)
        return known

    def get_package(self, digest: str) -> PackageRecord | None:
        return self._packages.get(digest)

    # ---------------------------------------------------------------- callers
    def add_token(
        self, caller: str, token_hash: str, *, now: float, role: TokenRole = TokenRole.CALLER
    ) -> None:
        self._tokens[token_hash] = Principal(caller, TokenRole(role))

    def caller_for_token(self, token_hash: str) -> str | None:
        found = self._tokens.get(token_hash)
        return None if found is None else found.caller

    def principal_for_token(self, token_hash: str) -> Principal | None:
        return self._tokens.get(token_hash)

    def revoke_token(self, token_hash: str) -> None:
        self._tokens.pop(token_hash, None)

    def save_pool_edit(self, spec: PoolSpec, *, now: float) -> PoolEdit:
        edit = PoolEdit(spec, now)
        self._pool_edits[spec.name] = edit
        return edit

    def pool_edits(self) -> list[PoolEdit]:
        return [self._pool_edits[name] for name in sorted(self._pool_edits)]

    def close(self) -> None:
        self._jobs.clear()
        self._attempts.clear()

"""`SqlJobStore`: the `JobStore` on SQLite, PostgreSQL or MySQL/MariaDB (SQLAlchemy Core).

Writes go through a `Committer` (group commit); reads use pooled connections directly. Each
write method builds a closure over plain values and validates everything it can (legal
transition, terminal state) before the closure runs, so the closure's first statement is the
conditional UPDATE, and a lost race is detected by its row count with nothing yet written.
Starts, the hot path, are merged per batch: the rows' versions are read under a row lock and
only the starts that still match are applied (see `_start_many`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from firepool.model import (
    AcquisitionPath,
    ConflictError,
    FirepoolError,
    InvalidTransitionError,
    JobErrorClass,
    JobSpec,
    JobState,
    LostRaceError,
    NotFoundError,
    RequestValidationError,
    attempt_id,
    parse_job_error_class,
)
from firepool.store.accounts import AccountsMixin
from firepool.store.committer import BulkWrite, Committer, Tx
from firepool.store.pool_edits import PoolEditsMixin
from firepool.store.records import (
    AttemptRecord,
    JobRecord,
    PodBinding,
    Submitted,
    check_transition,
    timings,
)
from firepool.store.rows import binding_from_row, job_from_row
from firepool.store.schema import attempts, jobs, pod_bindings

#: Timings a driver may stamp after the durable start (the others are set by transitions).
_STAMPABLE = {"started": jobs.c.started_at, "first_instruction": jobs.c.first_instruction_at}
_CANCEL_TRIES = 16


@functools.cache
def _cas_statement(columns: tuple[str, ...]) -> sa.Update:
    """One prepared conditional UPDATE per set of columns: building SQLAlchemy statements per
    call costs more than executing them, so the hot path only binds parameters."""
    return (
        sa.update(jobs)
        .where(jobs.c.id == sa.bindparam("w_id"), jobs.c.version == sa.bindparam("w_version"))
        .values({name: sa.bindparam(f"v_{name}") for name in ("version", *columns)})
    )


@functools.cache
def _timings_statement(names: tuple[str, ...]) -> sa.Update:
    """The stamps' UPDATE for one set of timing names (not version-checked: timings annotate
    the attempt, the retry count keeps a stamp off a later attempt)."""
    return (
        sa.update(jobs)
        .where(jobs.c.id == sa.bindparam("w_id"), jobs.c.retries == sa.bindparam("w_retries"))
        .values({_STAMPABLE[name].name: sa.bindparam(f"v_{name}") for name in names})
    )


_FINISH_ATTEMPT = (
    sa.update(attempts)
    .where(attempts.c.id == sa.bindparam("w_id"))
    .values(
        state=sa.bindparam("state"),
        finished_at=sa.bindparam("finished_at"),
        exit_code=sa.bindparam("exit_code"),
        error_class=sa.bindparam("error_class"),
    )
)

_BY_REQUEST = sa.select(jobs).where(
    jobs.c.caller == sa.bindparam("caller"), jobs.c.request_id == sa.bindparam("request_id")
)


#: `get` in one statement: the job's row with each of its bindings (every attempt's; the
#: current attempt's are kept), so a read is one round trip and one consistent snapshot
#: without an explicit transaction around it.
_GET = (
    sa.select(
        jobs,
        pod_bindings.c.attempt_id.label("b_attempt_id"),
        pod_bindings.c.rank.label("b_rank"),
        pod_bindings.c.pod.label("b_pod"),
        pod_bindings.c.pool.label("b_pool"),
        pod_bindings.c.acquisition.label("b_acquisition"),
        pod_bindings.c.reason.label("b_reason"),
    )
    .select_from(jobs.outerjoin(pod_bindings, pod_bindings.c.job_id == jobs.c.id))
    .where(jobs.c.id == sa.bindparam("id"))
    .order_by(pod_bindings.c.attempt_id, pod_bindings.c.rank)
)


@dataclass(frozen=True, slots=True)
class _Start:
    job: JobRecord
    pods: tuple[PodBinding, ...]
    now: float


_VERSIONS_FOR_UPDATE = (
    sa.select(jobs.c.id, jobs.c.version)
    .where(jobs.c.id.in_(sa.bindparam("ids", expanding=True)))
    .order_by(jobs.c.id)
    .with_for_update()
)


def new_job_id() -> str:
    return secrets.token_hex(8)


def spec_hash(spec: JobSpec) -> str:
    """What makes two submissions 'the same request': the spec without its request id."""
    return hashlib.sha256(spec.model_dump_json(exclude={"request_id"}).encode()).hexdigest()


class SqlJobStore(AccountsMixin, PoolEditsMixin):
    def __init__(self, engine: Engine, *, writers: int | None = None, max_batch: int = 256) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        if writers is None:
            # SQLite has one writer lock, so one writer thread; a server benefits from a few
            # transactions in flight so that one batch's COMMIT overlaps the next one's work.
            writers = 1 if self.dialect == "sqlite" else 4
        self._committer = Committer(engine, writers=writers, max_batch=max_batch)

    # ------------------------------------------------------------------ plumbing
    def _read(self, fn: Any) -> Any:
        with self.engine.connect() as conn:
            return fn(conn)

    def _read_one_statement(self, fn: Any) -> Any:
        """A read of a single statement needs no transaction of its own: SQLite runs it in
        its own implicit snapshot, so the explicit BEGIN (and the ROLLBACK on return to the
        pool) would be two more round trips through the driver for nothing."""
        with self.engine.connect().execution_options(firepool_autocommit_read=True) as conn:
            return fn(conn)

    def close(self) -> None:
        self._committer.close()
        self.engine.dispose()

    @staticmethod
    def _lost(conn: sa.Connection, job: JobRecord) -> LostRaceError | NotFoundError:
        row = conn.execute(
            sa.select(jobs.c.state, jobs.c.version).where(jobs.c.id == job.id)
        ).first()
        if row is None:
            return NotFoundError(f"job {job.id} not found", field="id")
        return LostRaceError(
            f"job {job.id} changed under this write: expected version {job.version}, "
            f"found version {row.version} in state {row.state}",
            field="version",
        )

    def _cas(self, conn: sa.Connection, job: JobRecord, **values: Any) -> None:
        """The conditional UPDATE every transition starts with."""
        params = {f"v_{name}": value for name, value in values.items()}
        params.update(w_id=job.id, w_version=job.version, v_version=job.version + 1)
        result = conn.execute(_cas_statement(tuple(sorted(values))), params)
        if result.rowcount != 1:
            raise self._lost(conn, job)

    @staticmethod
    def _bindings(conn: sa.Connection, attempt_ids: Collection[str]) -> dict[str, list[PodBinding]]:
        found: dict[str, list[PodBinding]] = {}
        if not attempt_ids:
            return found
        rows = conn.execute(
            sa.select(pod_bindings)
            .where(pod_bindings.c.attempt_id.in_(list(attempt_ids)))
            .order_by(pod_bindings.c.attempt_id, pod_bindings.c.rank)
        )
        for row in rows:
            found.setdefault(row.attempt_id, []).append(binding_from_row(row))
        return found

    def _jobs_from_rows(self, conn: sa.Connection, rows: Sequence[Any]) -> list[JobRecord]:
        ids = [attempt_id(r.id, r.retries) for r in rows if r.state != JobState.QUEUED]
        bound = self._bindings(conn, ids)
        return [job_from_row(r, bound.get(attempt_id(r.id, r.retries), ())) for r in rows]

    # ------------------------------------------------------------------ jobs
    def submit(self, caller: str, spec: JobSpec, *, now: float) -> Submitted:
        write = self._submit_write(caller, spec, now)
        try:
            return self._committer.run(write)
        except sa.exc.IntegrityError:
            # A concurrent retry of the same request_id committed first (possible with
            # several writer transactions in flight); now the lookup finds its job.
            return self._committer.run(write)

    async def submit_async(self, caller: str, spec: JobSpec, *, now: float) -> Submitted:
        """`submit` for an event loop: awaits the group commit without a worker thread."""
        write = self._submit_write(caller, spec, now)
        try:
            return await asyncio.wrap_future(self._committer.enqueue(write))
        except sa.exc.IntegrityError:
            return await asyncio.wrap_future(self._committer.enqueue(write))

    def _submit_write(self, caller: str, spec: JobSpec, now: float) -> Callable[[Tx], Submitted]:
        digest = spec_hash(spec)
        job = JobRecord(
            id=new_job_id(),
            caller=caller,
            spec=spec,
            state=JobState.QUEUED,
            version=1,
            timings=timings(submitted=now),
        )
        values = {
            "id": job.id,
            "caller": caller,
            "request_id": spec.request_id,
            "spec_hash": digest,
            "pool": spec.pool,
            "queue": spec.queue,
            "state": job.state.value,
            "version": job.version,
            "priority": spec.priority,
            "retries": 0,
            "cancel_requested": False,
            "spec": spec.model_dump_json(),
            "submitted_at": now,
        }

        def write(tx: Tx) -> Submitted:
            conn = tx.conn
            if spec.request_id is not None:
                row = conn.execute(
                    _BY_REQUEST, {"caller": caller, "request_id": spec.request_id}
                ).first()
                if row is not None:
                    if row.spec_hash != digest:
                        raise ConflictError(
                            f"request_id {spec.request_id!r} was already used for a different "
                            f"job ({row.id})",
                            field="request_id",
                        )
                    return Submitted(self._jobs_from_rows(conn, [row])[0], created=False)
            # Deferred to one bulk INSERT per batch. Two submissions of one request_id in the
            # same batch then collide on the unique key at flush, and the committer replays
            # each alone, where the second finds the first.
            tx.defer(jobs, [values])
            return Submitted(job, created=True)

        return write

    def get(self, job_id: str) -> JobRecord | None:
        def read(conn: sa.Connection) -> JobRecord | None:
            rows = conn.execute(_GET, {"id": job_id}).all()
            if not rows:
                return None
            first = rows[0]
            current = attempt_id(first.id, first.retries)
            pods = (
                ()
                if first.state == JobState.QUEUED
                else [
                    PodBinding(
                        rank=r.b_rank,
                        pod=r.b_pod,
                        acquisition=AcquisitionPath(r.b_acquisition),
                        reason=r.b_reason,
                        pool=r.b_pool,
                    )
                    for r in rows
                    if r.b_attempt_id == current
                ]
            )
            return job_from_row(first, pods)

        found: JobRecord | None = self._read_one_statement(read)
        return found

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
        # The page's keys first, then its rows: the caller's index holds `seq` (the primary
        # key), so the first query sorts keys only; selecting whole rows and sorting them made
        # a caller with 10,000 jobs cost ~80 ms per page here (the dashboard reads one per
        # refresh), this ~3 ms. Two queries, not `IN (subquery LIMIT n)`: MySQL refuses that.
        order = jobs.c.seq.desc() if newest_first else jobs.c.seq
        query = sa.select(jobs.c.seq).order_by(order).limit(max(1, limit))
        if after is not None:
            cursor = sa.select(jobs.c.seq).where(jobs.c.id == after).scalar_subquery()
            query = query.where(jobs.c.seq < cursor if newest_first else jobs.c.seq > cursor)
        if caller is not None:
            query = query.where(jobs.c.caller == caller)
        if states:
            query = query.where(jobs.c.state.in_([JobState(s).value for s in states]))
        if pool is not None:
            query = query.where(jobs.c.pool == pool)
        if queue is not None:
            query = query.where(jobs.c.queue == queue)

        def read(conn: sa.Connection) -> list[JobRecord]:
            seqs = [row[0] for row in conn.execute(query)]
            if not seqs:
                return []
            rows = conn.execute(sa.select(jobs).where(jobs.c.seq.in_(seqs)).order_by(order))
            return self._jobs_from_rows(conn, rows.all())

        found: list[JobRecord] = self._read(read)
        return found

    def start(self, job: JobRecord, bindings: Sequence[PodBinding], *, now: float) -> JobRecord:
        write, started = self._start_write(job, bindings, now)
        self._committer.run(write)
        return started

    async def start_async(
        self, job: JobRecord, bindings: Sequence[PodBinding], *, now: float
    ) -> JobRecord:
        """`start` for an event loop: awaits the group commit without parking a worker
        thread on it (a thread hop per attempt costs more than the merged UPDATE)."""
        write, started = self._start_write(job, bindings, now)
        await asyncio.wrap_future(self._committer.enqueue(write))
        return started

    def _start_write(
        self, job: JobRecord, bindings: Sequence[PodBinding], now: float
    ) -> tuple[BulkWrite, JobRecord]:
        check_transition(job, JobState.RUNNING)
        pods = tuple(replace(b, pool=b.pool or job.spec.pool) for b in bindings)
        write = BulkWrite("start", _Start(job, pods, now), self._start_many)
        stamps = timings(job.timings, assigned=now, started=None, first_instruction=None)
        started = replace(
            job, state=JobState.RUNNING, version=job.version + 1, timings=stamps, pods=pods
        )
        return write, started

    def _start_many(self, tx: Tx, items: list[_Start]) -> list[FirepoolError | None]:
        """Every start of a batch with three statements, however many jobs: lock and read the
        rows' versions (`SELECT ... FOR UPDATE`; SQLite's single writer already excludes
        everyone), keep the starts whose expected version is still there (a job twice in
        one batch can win once), and apply those with one executemany of the conditional
        UPDATE, whose row count must confirm every one of them."""
        ids = sorted({item.job.id for item in items})
        rows = tx.conn.execute(_VERSIONS_FOR_UPDATE, {"ids": ids}).all()
        current: dict[str, int] = {row.id: row.version for row in rows}
        results: list[FirepoolError | None] = []
        winners: list[_Start] = []
        claimed: set[str] = set()
        for item in items:
            job = item.job
            found = current.get(job.id)
            if found == job.version and job.id not in claimed:
                claimed.add(job.id)
                winners.append(item)
                results.append(None)
            elif found is None:
                results.append(NotFoundError(f"job {job.id} not found", field="id"))
            else:
                results.append(
                    LostRaceError(
                        f"job {job.id} changed under this write: expected version "
                        f"{job.version}, found version {found}",
                        field="version",
                    )
                )
        if winners:
            params = [
                {
                    "w_id": item.job.id,
                    "w_version": item.job.version,
                    "v_version": item.job.version + 1,
                    "v_state": JobState.RUNNING.value,
                    "v_assigned_at": item.now,
                    "v_started_at": None,
                    "v_first_instruction_at": None,
                }
                for item in winners
            ]
            columns = ("assigned_at", "first_instruction_at", "started_at", "state")
            changed = tx.conn.execute(_cas_statement(columns), params).rowcount
            if changed not in (len(winners), -1):
                # Cannot happen while the rows are locked; if it does, the committer rolls
                # the batch back and replays each start alone with its own check.
                raise RuntimeError(f"bulk start changed {changed} of {len(winners)} rows")
            for item in winners:
                self._start_rows(tx, item)
        return results

    @staticmethod
    def _start_rows(tx: Tx, item: _Start) -> None:
        job = item.job
        attempt = attempt_id(job.id, job.retries)
        attempt_row = {
            "id": attempt,
            "job_id": job.id,
            "retry": job.retries,
            "state": JobState.RUNNING.value,
            "started_at": item.now,
        }
        tx.defer(attempts, [attempt_row])
        tx.defer(
            pod_bindings,
            [
                {
                    "attempt_id": attempt,
                    "rank": b.rank,
                    "job_id": job.id,
                    "pod": b.pod,
                    "pool": b.pool,
                    "acquisition": b.acquisition.value,
                    "reason": str(b.reason),
                }
                for b in item.pods
            ],
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
        write, finished = self._finish_write(job, state, now, exit_code, error_class, message)
        self._committer.run(write)
        return finished

    async def finish_async(
        self,
        job: JobRecord,
        state: JobState,
        *,
        now: float,
        exit_code: int | None = None,
        error_class: JobErrorClass | None = None,
        message: str | None = None,
    ) -> JobRecord:
        """`finish` for an event loop: awaits the group commit without a worker thread."""
        write, finished = self._finish_write(job, state, now, exit_code, error_class, message)
        await asyncio.wrap_future(self._committer.enqueue(write))
        return finished

    def _finish_write(
        self,
        job: JobRecord,
        state: JobState,
        now: float,
        exit_code: int | None,
        error_class: JobErrorClass | None,
        message: str | None,
    ) -> tuple[Callable[[Tx], None], JobRecord]:
        if not state.terminal:
            raise InvalidTransitionError(f"{state.value} is not a terminal state", field="state")
        check_transition(job, state)
        error = error_class.value if error_class is not None else None
        had_attempt = job.state == JobState.RUNNING

        def write(tx: Tx) -> None:
            conn = tx.conn
            self._cas(
                conn,
                job,
                state=state.value,
                exit_code=exit_code,
                error_class=error,
                message=message,
                finished_at=now,
            )
            if had_attempt:
                conn.execute(
                    _FINISH_ATTEMPT,
                    {
                        "w_id": job.attempt,
                        "state": state.value,
                        "finished_at": now,
                        "exit_code": exit_code,
                        "error_class": error,
                    },
                )

        finished = replace(
            job,
            state=state,
            version=job.version + 1,
            exit_code=exit_code,
            error_class=error_class,
            message=message,
            timings=timings(job.timings, finished=now),
        )
        return write, finished

    def requeue(
        self, job: JobRecord, *, now: float, error_class: JobErrorClass | None = None
    ) -> JobRecord:
        check_transition(job, JobState.QUEUED)
        error = error_class.value if error_class is not None else None
        reclaims = job.reclaims + (error_class is JobErrorClass.RECLAIMED)

        def write(tx: Tx) -> None:
            conn = tx.conn
            self._cas(
                conn,
                job,
                state=JobState.QUEUED.value,
                retries=job.retries + 1,
                reclaims=reclaims,
                assigned_at=None,
                started_at=None,
                first_instruction_at=None,
            )
            conn.execute(
                sa.update(attempts)
                .where(attempts.c.id == job.attempt)
                .values(state=JobState.FAILED.value, finished_at=now, error_class=error)
            )

        self._committer.run(write)
        return replace(
            job,
            state=JobState.QUEUED,
            version=job.version + 1,
            retries=job.retries + 1,
            timings=timings(submitted=job.timings.get("submitted")),
            pods=(),
            reclaims=reclaims,
        )

    def cancel(self, job_id: str, *, now: float) -> JobRecord:
        def write(tx: Tx) -> JobRecord:
            conn = tx.conn
            row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
            if row is None:
                raise NotFoundError(f"job {job_id} not found", field="id")
            job = self._jobs_from_rows(conn, [row])[0]
            if job.state.terminal or (job.state == JobState.RUNNING and job.cancel_requested):
                return job
            if job.state == JobState.RUNNING:
                self._cas(conn, job, cancel_requested=True)
                return replace(job, version=job.version + 1, cancel_requested=True)
            self._cas(
                conn,
                job,
                state=JobState.CANCELLED.value,
                error_class=JobErrorClass.CANCELLED.value,
                message="cancelled before it started",
                finished_at=now,
            )
            return replace(
                job,
                state=JobState.CANCELLED,
                version=job.version + 1,
                error_class=JobErrorClass.CANCELLED,
                message="cancelled before it started",
                timings=timings(job.timings, finished=now),
            )

        for _ in range(_CANCEL_TRIES):
            try:
                result: JobRecord = self._committer.run(write)
            except LostRaceError:
                continue
            return result
        raise LostRaceError(f"job {job_id} kept changing; cancel not recorded", field="id")

    def record_timing(self, job: JobRecord, name: str, at: float) -> None:
        self.record_timings(job, {name: at})

    def record_timings(self, job: JobRecord, stamps: Mapping[str, float]) -> None:
        self._committer.run(self._timings_write(job, stamps))

    async def record_timings_async(self, job: JobRecord, stamps: Mapping[str, float]) -> None:
        """`record_timings` for an event loop: no worker thread waits on the commit."""
        await asyncio.wrap_future(self._committer.enqueue(self._timings_write(job, stamps)))

    def _timings_write(self, job: JobRecord, stamps: Mapping[str, float]) -> BulkWrite:
        """One write for all of an attempt's stamps, merged with the other attempts' stamps
        of the same batch into one executemany per set of names."""
        unknown = sorted(set(stamps) - set(_STAMPABLE))
        if unknown:
            raise RequestValidationError(
                f"timing {unknown[0]!r} cannot be stamped; use one of {sorted(_STAMPABLE)}",
                field="name",
            )
        payload = (job.id, job.retries, tuple(sorted(stamps.items())))
        return BulkWrite("timings", payload, self._timings_many)

    @staticmethod
    def _timings_many(
        tx: Tx, payloads: list[tuple[str, int, tuple[tuple[str, float], ...]]]
    ) -> list[None]:
        by_names: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job_id, retries, stamps in payloads:
            names = tuple(name for name, _ in stamps)
            params: dict[str, Any] = {"w_id": job_id, "w_retries": retries}
            params.update({f"v_{name}": at for name, at in stamps})
            by_names.setdefault(names, []).append(params)
        for names, rows in by_names.items():
            if names:
                tx.conn.execute(_timings_statement(names), rows)
        return [None] * len(payloads)

    def attempts(self, job_id: str) -> list[AttemptRecord]:
        def read(conn: sa.Connection) -> list[AttemptRecord]:
            rows = conn.execute(
                sa.select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.retry)
            ).all()
            bound = self._bindings(conn, [r.id for r in rows])
            return [
                AttemptRecord(
                    id=r.id,
                    job_id=r.job_id,
                    retry=r.retry,
                    state=JobState(r.state),
                    started_at=r.started_at,
                    finished_at=r.finished_at,
                    exit_code=r.exit_code,
                    error_class=parse_job_error_class(r.error_class),
                    pods=tuple(bound.get(r.id, ())),
                )
                for r in rows
            ]

        found: list[AttemptRecord] = self._read(read)
        return found

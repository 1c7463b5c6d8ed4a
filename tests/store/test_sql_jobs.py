"""The job lifecycle against every database: conditional transitions, attempts, bindings."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import pytest
import sqlalchemy as sa

from firepool.model import (
    AcquisitionPath,
    ConflictError,
    InvalidTransitionError,
    JobErrorClass,
    JobSpec,
    JobState,
    LostRaceError,
    NotFoundError,
    RequestValidationError,
)
from firepool.store import JobRecord, JobStore, PodBinding, SqlJobStore, open_store
from firepool.store.schema import attempts, jobs, pod_bindings
from firepool.store.scratch import Scratch


def spec(**overrides: object) -> JobSpec:
    fields: dict[str, object] = {"pool": "cpu", "command": ["python", "main.py"]}
    fields.update(overrides)
    return JobSpec.model_validate(fields)


def count(store: JobStore, table: sa.Table) -> int:
    """Rows of a table; through the contract's reads for a store without tables."""
    if isinstance(store, SqlJobStore):
        with store.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
    every = store.list_jobs(limit=1_000_000)
    if table is jobs:
        return len(every)
    tries = [a for job in every for a in store.attempts(job.id)]
    if table is attempts:
        return len(tries)
    assert table is pod_bindings
    return sum(len(a.pods) for a in tries)


WARM = PodBinding(0, "cpu-pod-1", AcquisitionPath.WARM, "same_session")


def test_submit_round_trips_the_whole_spec(store: JobStore) -> None:
    big = "numpy==1.26\n" * 20_000  # ~240 KB: beyond MySQL's plain TEXT
    asked = spec(env={"SEED": "7"}, requirements=big, lease_tag="s1", priority=5, pods=2)
    submitted = store.submit("alice", asked, now=100.0)
    assert submitted.created
    job = store.get(submitted.job.id)
    assert job is not None
    assert job.spec == asked
    assert (job.state, job.version, job.retries, job.caller) == (JobState.QUEUED, 1, 0, "alice")
    assert job.timings["submitted"] == 100.0
    assert store.get("no-such-job") is None


def test_request_id_makes_submission_idempotent(store: JobStore) -> None:
    first = store.submit("alice", spec(request_id="r-1"), now=1.0)
    again = store.submit("alice", spec(request_id="r-1"), now=2.0)
    assert again.job.id == first.job.id and not again.created
    other_caller = store.submit("bob", spec(request_id="r-1"), now=3.0)
    assert other_caller.created and other_caller.job.id != first.job.id
    with pytest.raises(ConflictError) as err:
        store.submit("alice", spec(request_id="r-1", command=["other"]), now=4.0)
    assert err.value.field == "request_id"
    assert count(store, jobs) == 2


def test_start_commits_running_with_attempt_and_bindings(store: JobStore) -> None:
    job = store.submit("alice", spec(pods=2), now=1.0).job
    binds = [WARM, PodBinding(1, "cpu-pod-9", AcquisitionPath.NEW, "no_warm_capacity")]
    running = store.start(job, binds, now=2.0)
    assert running.state == JobState.RUNNING and running.version == job.version + 1
    assert running.attempt == f"{job.id}:0"
    stored = store.get(job.id)
    assert stored == running
    assert [(p.pod, p.acquisition, p.reason, p.pool) for p in stored.pods] == [
        ("cpu-pod-1", AcquisitionPath.WARM, "same_session", "cpu"),
        ("cpu-pod-9", AcquisitionPath.NEW, "no_warm_capacity", "cpu"),
    ]
    [attempt] = store.attempts(job.id)
    assert attempt.id == f"{job.id}:0" and attempt.state == JobState.RUNNING
    assert len(attempt.pods) == 2


def test_a_stale_record_loses_the_race_and_writes_nothing(store: JobStore) -> None:
    job = store.submit("alice", spec(), now=1.0).job
    store.start(job, [WARM], now=2.0)
    with pytest.raises(LostRaceError):
        store.start(job, [PodBinding(0, "other-pod", AcquisitionPath.NEW, "x")], now=3.0)
    with pytest.raises(LostRaceError):
        store.finish(job, JobState.FAILED, now=3.0)
    assert count(store, attempts) == 1
    assert count(store, pod_bindings) == 1
    stored = store.get(job.id)
    assert stored is not None and stored.pods == (replace(WARM, pool="cpu"),)


def test_exactly_one_of_many_concurrent_starts_wins(sql_store: SqlJobStore) -> None:
    store = sql_store  # a database under concurrent writers (the memory store is one thread's)
    job = store.submit("alice", spec(), now=1.0).job
    outcomes: list[str] = []
    lock = threading.Lock()

    def claim(i: int) -> None:
        try:
            store.start(job, [PodBinding(0, f"pod-{i}", AcquisitionPath.WARM, "r")], now=2.0)
            result = "won"
        except LostRaceError:
            result = "lost"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]
    assert count(store, attempts) == 1 and count(store, pod_bindings) == 1


def test_unknown_job_is_not_found(store: JobStore) -> None:
    job = store.submit("alice", spec(), now=1.0).job
    ghost = replace(job, id="ghost")
    with pytest.raises(NotFoundError):
        store.start(ghost, [], now=2.0)
    with pytest.raises(NotFoundError):
        store.cancel("ghost", now=2.0)


def test_illegal_transitions_are_refused_before_writing(store: JobStore) -> None:
    job = store.submit("alice", spec(), now=1.0).job
    with pytest.raises(InvalidTransitionError):
        store.finish(job, JobState.SUCCEEDED, now=2.0)
    with pytest.raises(InvalidTransitionError):
        store.finish(job, JobState.RUNNING, now=2.0)
    with pytest.raises(InvalidTransitionError):
        store.requeue(job, now=2.0)
    done = store.finish(job, JobState.FAILED, now=2.0, error_class=JobErrorClass.UNKNOWN_POOL)
    with pytest.raises(InvalidTransitionError):
        store.start(done, [], now=3.0)
    stored = store.get(job.id)
    assert stored is not None and stored.version == 2 and stored.state == JobState.FAILED


def test_requeue_then_retry_gets_a_new_attempt_id(store: JobStore) -> None:
    job = store.submit("alice", spec(max_retries=2), now=1.0).job
    first = store.start(job, [WARM], now=2.0)
    queued = store.requeue(first, now=3.0, error_class=JobErrorClass.POD_LOST)
    assert queued.retries == 1 and queued.state == JobState.QUEUED and queued.pods == ()
    assert store.get(job.id) == queued
    second = store.start(
        queued, [PodBinding(0, "p2", AcquisitionPath.NEW, "no_warm_capacity")], now=4.0
    )
    assert second.attempt == f"{job.id}:1"
    done = store.finish(
        second,
        JobState.FAILED,
        now=5.0,
        exit_code=137,
        error_class=JobErrorClass.OOM,
        message="oom",
    )
    stored = store.get(job.id)
    assert stored == done
    assert (stored.exit_code, stored.error_class, stored.retries) == (137, JobErrorClass.OOM, 1)
    assert stored.pods[0].pod == "p2"
    history = store.attempts(job.id)
    assert [(a.id, a.state, a.error_class) for a in history] == [
        (f"{job.id}:0", JobState.FAILED, JobErrorClass.POD_LOST),
        (f"{job.id}:1", JobState.FAILED, JobErrorClass.OOM),
    ]
    assert history[1].exit_code == 137 and history[1].finished_at == 5.0


def test_success_keeps_exit_code_and_timings(store: JobStore) -> None:
    job = store.submit("alice", spec(), now=1.0).job
    running = store.start(job, [WARM], now=2.0)
    store.record_timing(running, "started", 2.5)
    store.record_timing(running, "first_instruction", 2.6)
    store.finish(running, JobState.SUCCEEDED, now=9.0, exit_code=0)
    stored = store.get(job.id)
    assert stored is not None
    assert stored.timings == {
        "submitted": 1.0,
        "assigned": 2.0,
        "started": 2.5,
        "first_instruction": 2.6,
        "finished": 9.0,
    }
    assert stored.exit_code == 0 and stored.error_class is None


def test_cancel_queued_running_and_finished(store: JobStore) -> None:
    queued = store.submit("alice", spec(), now=1.0).job
    cancelled = store.cancel(queued.id, now=2.0)
    assert (
        cancelled.state == JobState.CANCELLED and cancelled.error_class == JobErrorClass.CANCELLED
    )
    assert store.get(queued.id) == cancelled
    assert store.cancel(queued.id, now=3.0) == cancelled  # idempotent

    job = store.submit("alice", spec(), now=1.0).job
    running = store.start(job, [WARM], now=2.0)
    marked = store.cancel(job.id, now=3.0)
    assert marked.state == JobState.RUNNING and marked.cancel_requested
    assert marked.version == running.version + 1
    assert store.cancel(job.id, now=4.0) == marked
    with pytest.raises(LostRaceError):
        store.finish(running, JobState.SUCCEEDED, now=5.0, exit_code=0)  # must re-read first
    final = store.finish(marked, JobState.CANCELLED, now=5.0, error_class=JobErrorClass.CANCELLED)
    assert store.get(job.id) == final


def test_list_filters_and_scopes_by_caller(store: JobStore) -> None:
    a1 = store.submit("alice", spec(), now=1.0).job
    a2 = store.submit("alice", spec(pool="gpu", queue="eval"), now=2.0).job
    b1 = store.submit("bob", spec(), now=3.0).job
    store.start(a1, [WARM], now=4.0)
    assert [j.id for j in store.list_jobs()] == [a1.id, a2.id, b1.id]
    assert [j.id for j in store.list_jobs(caller="alice")] == [a1.id, a2.id]
    assert [j.id for j in store.list_jobs(caller="alice", states=[JobState.QUEUED])] == [a2.id]
    assert [j.id for j in store.list_jobs(states=[JobState.RUNNING])] == [a1.id]
    assert store.list_jobs(states=[JobState.RUNNING])[0].pods[0].pod == "cpu-pod-1"
    assert [j.id for j in store.list_jobs(pool="gpu")] == [a2.id]
    assert [j.id for j in store.list_jobs(queue="default", caller="bob")] == [b1.id]
    assert len(store.list_jobs(limit=2)) == 2
    assert [j.id for j in store.list_jobs(limit=2, after=a2.id)] == [b1.id]
    assert store.list_jobs(after="no-such-job") == []
    newest = store.list_jobs(newest_first=True)
    assert [j.id for j in newest] == [b1.id, a2.id, a1.id]
    assert [j.id for j in store.list_jobs(caller="alice", newest_first=True, limit=1)] == [a2.id]
    assert [j.id for j in store.list_jobs(newest_first=True, after=a2.id)] == [a1.id]


def test_concurrent_submissions_are_all_durable(db: Scratch) -> None:
    store = open_store(db.url, **db.engine_options)
    ids: list[str] = []
    lock = threading.Lock()

    def submit_many(worker: int) -> None:
        for i in range(25):
            job = store.submit(f"c{worker % 3}", spec(request_id=f"{worker}-{i}"), now=1.0).job
            with lock:
                ids.append(job.id)

    threads = [threading.Thread(target=submit_many, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    reopened = open_store(db.url, **db.engine_options)
    try:
        assert sorted(j.id for j in reopened.list_jobs(limit=1000)) == sorted(ids)
        assert len(set(ids)) == 200
    finally:
        reopened.close()


def test_concurrent_retries_of_one_request_id_make_one_job(sql_store: SqlJobStore) -> None:
    store = sql_store  # a database under concurrent writers (the memory store is one thread's)
    answers: list[tuple[str, bool]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(12)

    errors: list[BaseException] = []

    def submit() -> None:
        barrier.wait()
        try:
            result = store.submit("alice", spec(request_id="same"), now=1.0)
        except BaseException as err:
            errors.append(err)
            return
        with lock:
            answers.append((result.job.id, result.created))

    threads = [threading.Thread(target=submit) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(answers) == 12 and len({job_id for job_id, _ in answers}) == 1
    assert sum(created for _, created in answers) == 1
    assert count(store, jobs) == 1


def test_get_returns_only_the_current_attempts_bindings_in_rank_order(store: JobStore) -> None:
    job = store.submit("alice", spec(pods=2, max_retries=1), now=1.0).job
    two = [
        PodBinding(1, "b", AcquisitionPath.WARM, "same_session"),
        PodBinding(0, "a", AcquisitionPath.NEW, "no_warm_capacity"),
    ]
    first = store.start(job, two, now=2.0)
    queued = store.requeue(first, now=3.0)
    queued_read = store.get(job.id)
    assert queued_read is not None and queued_read.pods == ()
    store.start(queued, [PodBinding(0, "c", AcquisitionPath.WARM, "x"), two[0]], now=4.0)
    stored = store.get(job.id)
    assert stored is not None
    assert [(p.rank, p.pod) for p in stored.pods] == [(0, "c"), (1, "b")]
    assert store.get("f" * 16) is None


def test_record_timings_stamps_several_names_in_one_write(store: JobStore) -> None:
    job = store.submit("alice", spec(), now=1.0).job
    running = store.start(job, [WARM], now=2.0)
    store.record_timings(running, {"started": 2.5, "first_instruction": 2.6})
    stored = store.get(job.id)
    assert stored is not None
    assert (stored.timings["started"], stored.timings["first_instruction"]) == (2.5, 2.6)
    assert stored.version == running.version  # an annotation, not a transition


def test_record_timings_names_the_field_of_an_unknown_stamp(sql_store: SqlJobStore) -> None:
    running = sql_store.start(sql_store.submit("alice", spec(), now=1.0).job, [WARM], now=2.0)
    with pytest.raises(RequestValidationError) as err:
        sql_store.record_timings(running, {"started": 2.5, "finished": 3.0})
    assert err.value.field == "name" and "finished" in err.value.message
    stored = sql_store.get(running.id)
    assert stored is not None and stored.timings["started"] is None  # nothing written


def test_record_timings_of_an_earlier_attempt_do_not_land(sql_store: SqlJobStore) -> None:
    job = sql_store.submit("alice", spec(max_retries=1), now=1.0).job
    first = sql_store.start(job, [WARM], now=2.0)
    second = sql_store.start(sql_store.requeue(first, now=3.0), [WARM], now=4.0)
    sql_store.record_timings(first, {"started": 2.5, "first_instruction": 2.5})
    stored = sql_store.get(job.id)
    assert stored is not None and stored.timings["started"] is None
    sql_store.record_timings(second, {"started": 4.5})
    stored = sql_store.get(job.id)
    assert stored is not None and stored.timings["started"] == 4.5


def test_async_writes_match_the_blocking_ones(sql_store: SqlJobStore) -> None:
    """`start_async`, `record_timings_async` and `finish_async` (the service's event-loop
    path) commit exactly what `start`, `record_timings` and `finish` do; many at once share
    the group commit."""

    async def lifecycle(job: JobRecord) -> JobRecord:
        running = await sql_store.start_async(job, [WARM], now=2.0)
        await sql_store.record_timings_async(running, {"started": 2.5, "first_instruction": 2.6})
        return await sql_store.finish_async(running, JobState.SUCCEEDED, now=3.0, exit_code=0)

    async def main(jobs: list[JobRecord]) -> list[JobRecord]:
        return list(await asyncio.gather(*(lifecycle(j) for j in jobs)))

    submitted = [sql_store.submit("alice", spec(), now=1.0).job for _ in range(8)]
    finished = asyncio.run(main(submitted))
    for done in finished:
        stored = sql_store.get(done.id)
        assert stored is not None
        assert stored.state == JobState.SUCCEEDED and stored.version == done.version == 3
        assert stored.timings == {
            "submitted": 1.0,
            "assigned": 2.0,
            "started": 2.5,
            "first_instruction": 2.6,
            "finished": 3.0,
        }
        assert [(a.state, a.exit_code) for a in sql_store.attempts(done.id)] == [
            (JobState.SUCCEEDED, 0)
        ]
    with pytest.raises(LostRaceError):
        asyncio.run(sql_store.start_async(submitted[0], [WARM], now=9.0))

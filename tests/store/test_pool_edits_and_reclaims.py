"""What a broker restart must find in the store: applied pool edits, and which attempts were
reclaimed (so a reclaim never counts against a job's failure retries, before or after)."""

from __future__ import annotations

import sqlalchemy as sa

from firepool.model import AcquisitionPath, JobErrorClass, JobSpec, JobState
from firepool.store import JobStore, PodBinding, open_store
from firepool.store.engine import create_engine
from firepool.store.migrate import upgrade
from firepool.store.scratch import Scratch
from firepool.testing.control import cpu_pool

WARM = PodBinding(0, "cpu-pod-1", AcquisitionPath.WARM, "same_session")
SPEC = JobSpec(pool="cpu", command=["python", "main.py"], max_retries=1)


def test_an_applied_edit_replaces_the_pool_s_earlier_one(store: JobStore) -> None:
    assert store.pool_edits() == []
    first = cpu_pool(max_count=4, template_version=2, image="a")
    second = first.model_copy(update={"template_version": 3, "image": "b"})
    other = cpu_pool("another", max_count=2)
    store.save_pool_edit(first, now=1.0)
    store.save_pool_edit(other, now=2.0)
    saved = store.save_pool_edit(second, now=3.0)
    assert (saved.spec, saved.applied_at) == (second, 3.0)
    assert [(e.spec, e.applied_at) for e in store.pool_edits()] == [(other, 2.0), (second, 3.0)]


def test_a_reclaimed_requeue_is_counted_and_a_failed_one_is_not(store: JobStore) -> None:
    job = store.submit("alice", SPEC, now=0.0).job
    job = store.start(job, [WARM], now=1.0)
    job = store.requeue(job, now=2.0, error_class=JobErrorClass.RECLAIMED)
    assert (job.retries, job.reclaims) == (1, 1)
    job = store.start(job, [WARM], now=3.0)
    job = store.requeue(job, now=4.0, error_class=JobErrorClass.NON_ZERO_EXIT)
    assert (job.retries, job.reclaims) == (2, 1)
    read = store.get(job.id)
    assert read is not None and (read.retries, read.reclaims) == (2, 1)
    (listed,) = store.list_jobs(states=[JobState.QUEUED])
    assert listed.reclaims == 1


def test_edits_and_reclaims_survive_reopening_the_store(db: Scratch) -> None:
    store = open_store(db.url, **db.engine_options)
    edit = cpu_pool(max_count=4, template_version=2, image="edited")
    try:
        store.save_pool_edit(edit, now=5.0)
        job = store.submit("alice", SPEC, now=0.0).job
        job = store.start(job, [WARM], now=1.0)
        store.requeue(job, now=2.0, error_class=JobErrorClass.RECLAIMED)
    finally:
        store.close()
    reopened = open_store(db.url, **db.engine_options)
    try:
        assert [e.spec for e in reopened.pool_edits()] == [edit]
        read = reopened.get(job.id)
        assert read is not None and (read.retries, read.reclaims) == (1, 1)
    finally:
        reopened.close()


def test_the_migration_counts_reclaims_already_stored_in_attempts(db: Scratch) -> None:
    engine = create_engine(db.url, **db.engine_options)
    try:
        upgrade(engine, "0002")
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO jobs (id, caller, spec_hash, pool, queue, state, version, "
                    "priority, retries, cancel_requested, spec, submitted_at) VALUES "
                    "('j1', 'alice', 'h', 'cpu', 'default', 'QUEUED', 3, 0, 2, :no, '{}', 0.0)"
                ),
                {"no": False},
            )
            for retry, error in enumerate(["Reclaimed", "NonZeroExit"]):
                conn.execute(
                    sa.text(
                        "INSERT INTO attempts (id, job_id, retry, state, started_at, "
                        "error_class) VALUES (:id, 'j1', :retry, 'FAILED', 1.0, :error)"
                    ),
                    {"id": f"j1:{retry}", "retry": retry, "error": error},
                )
        upgrade(engine)
        with engine.connect() as conn:
            found = conn.execute(sa.text("SELECT reclaims FROM jobs WHERE id = 'j1'"))
            assert found.scalar_one() == 1
    finally:
        engine.dispose()

"""Group commit: batching, isolation of a failing write, and refusal after close."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from firepool.model import NotFoundError
from firepool.store.committer import BulkWrite, Committer, Tx
from firepool.store.engine import create_engine, default_url

NOTES = sa.Table("notes", sa.MetaData(), sa.Column("n", sa.Integer, primary_key=True))


@pytest.fixture
def committer(tmp_path: Path) -> Committer:
    engine = create_engine(default_url(tmp_path))
    NOTES.metadata.create_all(engine)
    return Committer(engine, linger=0.005)


def count(committer: Committer) -> int:
    with committer._engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(NOTES)).scalar_one())


def insert(n: int) -> Callable[[Tx], int]:
    def write(tx: Tx) -> int:
        tx.conn.execute(NOTES.insert(), {"n": n})
        return n

    return write


def test_concurrent_writes_share_transactions(committer: Committer) -> None:
    sizes: list[int] = []
    original = committer._commit

    def spy(batch: list[object]) -> None:
        sizes.append(len(batch))
        original(batch)  # type: ignore[arg-type]

    committer._commit = spy  # type: ignore[method-assign]
    barrier = threading.Barrier(16)

    def worker(base: int) -> None:
        barrier.wait()
        for i in range(20):
            assert committer.run(insert(base * 100 + i)) == base * 100 + i

    threads = [threading.Thread(target=worker, args=(b,)) for b in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committer.close()
    assert count(committer) == 320
    assert max(sizes) > 1 and len(sizes) < 320


def test_a_failing_write_does_not_sink_its_batch(committer: Committer) -> None:
    results: dict[int, object] = {}
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        barrier.wait()
        try:
            # workers 3 and 5 both write key 3: exactly one of them fails, and alone
            results[n] = committer.run(insert(3 if n in (3, 5) else n))
        except sa.exc.IntegrityError as err:
            results[n] = err

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [n for n, r in results.items() if isinstance(r, sa.exc.IntegrityError)]
    assert len(failed) == 1 and failed[0] in (3, 5)
    assert count(committer) == 7
    committer.close()


def test_bulk_writes_merge_and_report_per_payload(committer: Committer) -> None:
    calls: list[list[int]] = []

    def run_many(tx: Tx, payloads: list[int]) -> list[object]:
        calls.append(payloads)
        return [NotFoundError("odd") if p % 2 else p for p in payloads]

    assert committer.run(BulkWrite("k", 2, run_many)) == 2
    with pytest.raises(NotFoundError):
        committer.run(BulkWrite("k", 1, run_many))
    assert calls == [[2], [1]]
    committer.close()


def test_writes_after_close_are_refused(committer: Committer) -> None:
    committer.close()
    with pytest.raises(RuntimeError, match="closed"):
        committer.run(insert(1))


def test_a_cancelled_waiter_does_not_kill_the_writer(committer: Committer) -> None:
    """An event loop awaiting a write through `asyncio.wrap_future` cancels its future when
    its task is cancelled; the write still commits and the writer thread lives on."""
    entered, release = threading.Event(), threading.Event()

    def blocking(tx: Tx) -> None:
        entered.set()
        release.wait(timeout=30)

    first = committer.enqueue(blocking)
    assert entered.wait(timeout=30)  # the writer is busy with `first`
    abandoned = committer.enqueue(insert(1))
    assert abandoned.cancel()
    release.set()
    first.result(timeout=30)
    assert committer.run(insert(2)) == 2  # the writer is still alive
    assert count(committer) == 2  # the abandoned write committed all the same
    committer.close()

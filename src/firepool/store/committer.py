"""Group commit: many writers, few transactions, one durable flush per batch.

A write is a function of a connection. Callers hand it to `Committer.run` and block until the
transaction holding it has committed, so a caller never acts on a write that is not yet
durable (the dispatcher launches only after `start` returns). Writer threads take whatever
has queued up while the previous batch was flushing and commit it as one transaction: under
load the fsync (or the network round trip of COMMIT) is shared by the whole batch, with no
added delay when there is no load.

Writes must raise a `FirepoolError` only before they have written anything (the conditional
UPDATE comes first and reports a lost race by its row count), so one refused write never
spoils its batch. Any other error rolls the batch back and replays each write in a
transaction of its own, so a deadlock or a duplicate key reaches only the write that caused it.
A store outage (`StoreUnavailableError`, see `store.outage`) is not replayed: the batch's
callers all get it at once, nothing of the batch having been committed, and decide themselves
when to try again (the API answers 503, the broker keeps the write and retries it).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from firepool.model import FirepoolError, StoreUnavailableError

T = TypeVar("T")
Write = Callable[["Tx"], Any]

_STOP = object()


class Tx:
    """What a write sees: the batch's connection, plus `defer` for INSERTs that need no answer.

    Deferred rows are inserted once per table per batch (one executemany) just before COMMIT:
    a batch of 200 dispatches then costs 200 conditional UPDATEs and two bulk INSERTs rather
    than 600 statements, which is most of the difference between SQLite's engine limit and
    Python's overhead per statement.
    """

    __slots__ = ("_deferred", "conn")

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn
        self._deferred: dict[sa.Table, list[dict[str, Any]]] = {}

    def defer(self, table: sa.Table, rows: list[dict[str, Any]]) -> None:
        if rows:
            self._deferred.setdefault(table, []).extend(rows)

    def flush(self) -> None:
        for table, rows in self._deferred.items():
            self.conn.execute(table.insert(), rows)
        self._deferred.clear()


class BulkWrite:
    """A write that can be merged with others of the same `key` in one batch.

    `run_many(tx, payloads)` handles them together (one UPDATE for many rows, say) and
    returns, per payload, either its result or the `FirepoolError` it ends with; the same
    rule holds as for plain writes: an error only for a payload that wrote nothing. Called
    alone (the replay path), a bulk write is simply a batch of one.
    """

    __slots__ = ("key", "payload", "run_many")

    def __init__(
        self,
        key: object,
        payload: Any,
        run_many: Callable[[Tx, list[Any]], list[Any]],
    ) -> None:
        self.key = key
        self.payload = payload
        self.run_many = run_many

    def __call__(self, tx: Tx) -> Any:
        [result] = self.run_many(tx, [self.payload])
        if isinstance(result, FirepoolError):
            raise result
        return result


class Committer:
    def __init__(
        self,
        engine: Engine,
        *,
        writers: int = 1,
        max_batch: int = 256,
        linger: float = 0.005,
    ) -> None:
        self._engine = engine
        self._linger = linger
        self._max_batch = max_batch
        # Several writer threads wait on this queue, some with timeouts (the linger). With
        # queue.SimpleQueue in that pattern we saw writes stranded (every writer blocked in
        # get() with items queued; 2 in ~40 benchmark runs on CPython 3.11); the
        # Condition-based Queue showed none in as many runs.
        self._queue: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"firepool-commit-{i}", daemon=True)
            for i in range(writers)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, write: Callable[[Tx], T]) -> T:
        """Run `write` in a group-committed transaction; return once it is durable."""
        return self.enqueue(write).result()

    def enqueue(self, write: Callable[[Tx], T]) -> Future[T]:
        """Queue `write`; the future resolves once its transaction is durable. Lets an event
        loop await a commit (`asyncio.wrap_future`) without parking a thread on it."""
        if self._closed:
            raise RuntimeError("store is closed")
        future: Future[T] = Future()
        self._queue.put((write, future))
        return future

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()
        # A write that raced past the closed check lands behind the stop marks: fail it
        # rather than leave its caller waiting forever.
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP:
                _settle(item[1], False, RuntimeError("store is closed"))

    def _loop(self) -> None:
        last = 1
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            stop = False
            # Expect about as many writers as last time: the callers of the previous batch
            # are typically a moment away from their next write. Waiting up to `linger` for
            # them makes batches full instead of a full batch followed by a trickle of tiny
            # ones, each paying its own fsync. With no load (last == 1) nothing waits.
            want = min(max(last, 1), self._max_batch)
            deadline = time.monotonic() + self._linger
            while len(batch) < self._max_batch:
                try:
                    if len(batch) < want:
                        timeout = deadline - time.monotonic()
                        if timeout <= 0:
                            raise queue.Empty
                        nxt = self._queue.get(timeout=timeout)
                    else:
                        nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                batch.append(nxt)
            last = len(batch)
            self._commit(batch)
            if stop:
                return

    def _connect(self) -> sa.Connection:
        return self._engine.connect().execution_options(firepool_write=True)

    def _commit(self, batch: list[tuple[Write, Future[Any]]]) -> None:
        try:
            with self._connect() as conn, conn.begin():
                tx = Tx(conn)
                results = self._run_batch(tx, [write for write, _ in batch])
                tx.flush()
        except StoreUnavailableError as err:
            for _, future in batch:
                _settle(future, False, err)
            return
        except Exception:
            if len(batch) == 1:
                self._commit_alone(batch[0])
            else:
                for item in batch:
                    self._commit_alone(item)
            return
        for (ok, value), (_, future) in zip(results, batch, strict=True):
            _settle(future, ok, value)

    @staticmethod
    def _run_batch(tx: Tx, writes: list[Write]) -> list[tuple[bool, Any]]:
        """Run a batch's writes; bulk writes of one key run together at the first one's turn."""
        results: list[tuple[bool, Any] | None] = [None] * len(writes)
        groups: dict[object, list[tuple[int, BulkWrite]]] = {}
        for index, write in enumerate(writes):
            if isinstance(write, BulkWrite):
                groups.setdefault(write.key, []).append((index, write))
        done: set[object] = set()
        for index, write in enumerate(writes):
            if isinstance(write, BulkWrite):
                if write.key in done:
                    continue
                done.add(write.key)
                members = groups[write.key]
                values = write.run_many(tx, [member.payload for _, member in members])
                for (i, _), value in zip(members, values, strict=True):
                    results[i] = (not isinstance(value, FirepoolError), value)
                continue
            try:
                results[index] = (True, write(tx))
            except StoreUnavailableError:
                raise  # the connection is gone: the whole batch fails, nothing committed
            except FirepoolError as err:
                results[index] = (False, err)
        return [r for r in results if r is not None]

    def _commit_alone(self, item: tuple[Write, Future[Any]]) -> None:
        write, future = item
        try:
            with self._connect() as conn, conn.begin():
                tx = Tx(conn)
                value = write(tx)
                tx.flush()
        except BaseException as err:
            _settle(future, False, err)
        else:
            _settle(future, True, value)


def _settle(future: Future[Any], ok: bool, value: Any) -> None:
    """Hand a write's outcome to its caller. An event loop awaiting `enqueue` through
    `asyncio.wrap_future` cancels the future when its task is cancelled (a broker shutting
    down); the write still committed, nobody waits for it, and setting a result on a
    cancelled future would raise and kill the writer thread with every later write."""
    if not future.set_running_or_notify_cancel():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)

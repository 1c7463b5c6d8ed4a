"""The reset's view of /proc (procfs.StatReader): descriptors kept open between snapshots must
give what a fresh snapshot gives, let go of processes that are gone, and never read a reused
pid as the process that had it before."""

from __future__ import annotations

import os
import select
import subprocess
from collections.abc import Iterator

import pytest

from firepool.agent import procfs

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def _stable(proc: procfs.Proc) -> tuple[int, int, int, int, int]:
    """What cannot change between two reads of a sleeping child (its state can)."""
    return proc.pid, proc.ppid, proc.pgid, proc.sid, proc.start_ticks


def test_a_snapshot_reads_what_a_fresh_one_reads(children: list[subprocess.Popen[bytes]]) -> None:
    reader = procfs.StatReader()
    try:
        for _ in range(2):  # the second through the kept descriptors
            got, fresh = reader.snapshot(), procfs.snapshot()
            for child in children:
                assert _stable(got[child.pid]) == _stable(fresh[child.pid])
                assert got[child.pid].ppid == os.getpid()
            assert reader.held >= len(children)
    finally:
        reader.close()


def test_a_reaped_process_leaves_the_snapshot_and_its_descriptor_is_let_go(
    children: list[subprocess.Popen[bytes]],
) -> None:
    reader = procfs.StatReader()
    try:
        victim = children[0]
        assert victim.pid in reader.snapshot()
        assert victim.pid in reader._fds
        victim.kill()
        victim.wait()  # reaped: the pid is free
        assert victim.pid not in reader.snapshot()
        # About the victim alone: a count over the host would move with any other process
        # that starts or exits meanwhile. Pids are handed out cyclically, so this one is not
        # another's yet.
        assert victim.pid not in reader._fds
    finally:
        reader.close()


def test_a_descriptor_of_a_dead_process_is_never_read_for_its_pid(
    children: list[subprocess.Popen[bytes]],
) -> None:
    """Pid reuse, made to order: the reader holds, for a live child's pid, a descriptor on a
    process that was reaped since. The pid must be read afresh, as the live child."""
    reader = procfs.StatReader()
    gone = subprocess.Popen(["true"])
    stale = os.open(f"/proc/{gone.pid}/stat", os.O_RDONLY)
    gone.wait()
    alive = children[1]
    try:
        reader.snapshot()
        os.close(reader._fds[alive.pid])
        reader._fds[alive.pid] = stale
        proc = reader.snapshot()[alive.pid]
        assert _stable(proc) == _stable(procfs.snapshot()[alive.pid])
    finally:
        reader.close()


def test_past_its_limit_the_reader_reads_by_path(children: list[subprocess.Popen[bytes]]) -> None:
    reader = procfs.StatReader(limit=0)
    got = reader.snapshot()
    assert reader.held == 0
    assert all(child.pid in got for child in children)


def _start_ticks(pid: int) -> int:
    proc = procfs.read_proc(pid)
    assert proc is not None
    return proc.start_ticks


@pytest.fixture
def older_and_newer() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """Two children whose start times differ by at least one clock tick."""
    older = subprocess.Popen(["sleep", "60"])
    newer = None
    try:
        while newer is None or _start_ticks(newer.pid) <= _start_ticks(older.pid):
            if newer is not None:
                newer.kill()
                newer.wait()
            newer = subprocess.Popen(["sleep", "60"])
        yield older, newer
    finally:
        for proc in (older, newer):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_processes_older_than_asked_are_left_out_unless_included(
    older_and_newer: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    older, newer = older_and_newer
    since = _start_ticks(newer.pid)
    reader = procfs.StatReader()
    try:
        for _ in range(2):  # the second without reading what the first left out
            got = reader.snapshot(older_than=since)
            assert newer.pid in got and older.pid not in got
            assert all(p.start_ticks >= since or p.dead for p in got.values())
            assert reader.left_out > 0
        # A pid asked for is read, however old (a cgroup member moved into the pod).
        assert _stable(reader.snapshot(older_than=since, include={older.pid})[older.pid]) == (
            _stable(procfs.snapshot()[older.pid])
        )
        # Without a bound, everything is read again.
        assert older.pid in reader.snapshot()
        assert reader.left_out == 0
    finally:
        reader.close()


def test_a_left_out_process_that_exits_is_read_afresh_whoever_has_its_pid(
    older_and_newer: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    """Pid reuse, made to order: the reader remembers a live child by a pidfd that is, in
    truth, on a process reaped since. The pid must be read again, as the live child."""
    older, newer = older_and_newer
    since = _start_ticks(newer.pid) + 10_000  # both are older than that
    reader = procfs.StatReader()
    gone = subprocess.Popen(["true"])
    stale = os.pidfd_open(gone.pid)
    gone.wait()
    try:
        got = reader.snapshot(older_than=since)
        assert older.pid not in got and newer.pid not in got
        # swap the live child's pidfd for the reaped process's
        real = reader._old[older.pid]
        reader._exits.unregister(real)
        del reader._old_by_fd[real]
        os.close(real)
        reader._old[older.pid] = stale
        reader._old_by_fd[stale] = older.pid
        reader._exits.register(stale)
        # The pidfd says "exited": the pid is read afresh, found old again, and remembered
        # by a pidfd on the live child.
        assert older.pid not in reader.snapshot(older_than=since)
        renewed = reader._old[older.pid]
        assert renewed != stale
        assert not select.select([renewed], [], [], 0)[0]  # a pidfd reads once it exits
        assert _stable(reader.snapshot(older_than=since, include={older.pid})[older.pid]) == (
            _stable(procfs.snapshot()[older.pid])
        )
        # A real exit: the child is reaped, its pidfd is let go, its pid is not reported.
        reader.snapshot(older_than=since)
        pidfd = reader._old[newer.pid]
        newer.kill()
        newer.wait()
        got = reader.snapshot(older_than=since)
        # About newer alone, not a count of every old process on the host (any of them may
        # exit meanwhile). Pids are handed out cyclically, so newer's is not another's yet.
        assert newer.pid not in got
        # (the pidfd's number may be a new old process's by now, so it is asked by pid)
        assert newer.pid not in reader._old and reader._old_by_fd.get(pidfd) != newer.pid
        assert older.pid in reader._old  # the other child is still left out
    finally:
        reader.close()

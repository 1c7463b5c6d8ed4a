"""The reset's view of /proc (procfs.StatReader): descriptors kept open between snapshots must
give what a fresh snapshot gives, let go of processes that are gone, and never read a reused
pid as the process that had it before."""

from __future__ import annotations

import os
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
        held = reader.held
        victim.kill()
        victim.wait()  # reaped: the pid is free
        assert victim.pid not in reader.snapshot()
        assert reader.held < held
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

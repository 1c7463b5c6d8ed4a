"""The copier of one stream (agent/output.py) on its own: the file and the attempt's directory
appear with the first byte, and once the reset sealed the stream nothing new is created (a file
made after the reset's wipe would survive it)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from firepool.agent.output import BoundedStream, marker

pytestmark = pytest.mark.timeout(30)


def _started(path: Path, max_bytes: int = 1 << 20) -> tuple[BoundedStream, int]:
    """A running copier and the job's write end (a copy the test holds, as a job would)."""
    stream = BoundedStream(path, "stdout", max_bytes)
    assert stream.writer is not None
    job_end = os.dup(stream.writer)
    stream.start()
    return stream, job_end


def test_a_stream_that_never_gets_a_byte_makes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "a-1_0" / "stdout"
    stream, job_end = _started(path)
    os.close(job_end)
    assert stream.wait(10)
    assert not path.parent.exists()


def test_the_first_byte_makes_the_directory_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "a-1_0" / "stdout"
    stream, job_end = _started(path, max_bytes=4)
    os.write(job_end, b"hello")
    os.close(job_end)
    assert stream.wait(10)
    assert path.read_bytes() == b"hell" + marker("stdout", 4)
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_a_sealed_stream_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "a-1_0" / "stdout"
    stream, job_end = _started(path)
    stream.seal()
    os.write(job_end, b"late")
    os.close(job_end)
    assert stream.wait(10)
    assert not path.parent.exists()
    assert stream.discarded == 4 and stream.dropped == 0


def test_a_file_made_before_the_seal_takes_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "a-1_0" / "stdout"
    stream, job_end = _started(path)
    os.write(job_end, b"early ")
    for _ in range(1000):  # until the copier made the file
        if path.exists() and path.stat().st_size:
            break
        os.sched_yield()
        stream.done.wait(0.005)
    stream.seal()
    os.write(job_end, b"late")
    os.close(job_end)
    assert stream.wait(10)
    assert path.read_bytes() == b"early late"


def test_an_abandoned_stream_is_done_at_once(tmp_path: Path) -> None:
    stream = BoundedStream(tmp_path / "stdout", "stdout", 1 << 20)
    stream.abandon()
    assert stream.wait(0) and stream.writer is None
    assert not (tmp_path / "stdout").exists()


def test_streams_share_one_copier_thread(tmp_path: Path) -> None:
    """A thread per stream cost two thread starts per attempt; one copier serves them all."""
    started = [_started(tmp_path / f"a-{i}_0" / "stdout") for i in range(3)]  # the pump's up
    before = threading.active_count()
    more = [_started(tmp_path / f"b-{i}_0" / "stdout") for i in range(20)]
    assert threading.active_count() <= before  # the open streams did not add threads
    for i, (_, job_end) in enumerate(started + more):
        os.write(job_end, f"{i}\n".encode())
        os.close(job_end)
    for i, (stream, _) in enumerate(started + more):
        assert stream.wait(10)
        assert stream.path.read_bytes() == f"{i}\n".encode()

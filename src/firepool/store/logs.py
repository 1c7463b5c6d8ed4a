"""Log storage: each attempt's output, kept by the broker, read back by the API.

`FileLogStorage` keeps one file per attempt under `<data-dir>/logs/<job-id>/<retry>.log`. It is
an adapter like the job store: the driver appends through the `LogSink` protocol it defines,
the API reads byte ranges through its `LogSource` protocol, and another storage (an object
store for a cluster) can stand in for both. Offsets are byte offsets into the attempt's log,
so a client can poll `next_offset` to follow a running job.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class LogChunk:
    data: bytes
    offset: int
    size: int  # bytes in the attempt's log so far


class FileLogStorage:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, job_id: str, retry: int) -> Path:
        if not _SAFE_ID.match(job_id) or retry < 0:
            raise ValueError(f"bad log key {job_id!r}:{retry}")
        return self.root / job_id / f"{retry}.log"

    def append(self, job_id: str, retry: int, data: bytes) -> None:
        target = self.path(job_id, retry)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "ab") as out:
            out.write(data)

    def read(self, job_id: str, retry: int, *, offset: int, limit: int) -> LogChunk:
        target = self.path(job_id, retry)
        try:
            with open(target, "rb") as log:
                size = os.fstat(log.fileno()).st_size
                start = min(max(offset, 0), size)
                log.seek(start)
                return LogChunk(log.read(max(limit, 0)), start, size)
        except FileNotFoundError:
            return LogChunk(b"", 0, 0)


#: The per-rank record of how far each stream of an attempt's output has been stored: fixed
#: width, so one `pwrite` replaces it whole.
_OFFSETS = "{size:020d} {stdout:020d} {stderr:020d}\n"
_OFFSETS_LEN = len(_OFFSETS.format(size=0, stdout=0, stderr=0))
STREAMS = ("stdout", "stderr")


@dataclass(frozen=True, slots=True)
class StreamOffsets:
    """How much of an attempt's output one rank's log holds: the log's size and, per stream,
    the byte offset in the pod's stream up to which it has been stored."""

    size: int = 0
    stdout: int = 0
    stderr: int = 0

    def of(self, stream: str) -> int:
        if stream not in STREAMS:
            raise ValueError(f"no log stream {stream!r}: stdout or stderr")
        return self.stdout if stream == "stdout" else self.stderr


class RankLogStorage(FileLogStorage):
    """Every rank's output, each stream resumable at its byte offset, each byte stored once.

    Rank 0's log is the attempt's log of `FileLogStorage` (`<retry>.log`), so readers that know
    no ranks see what they always saw; rank N > 0 has `<retry>.rank<N>.log`. Beside each log a
    fixed-width `.offsets` record says how much of the log is committed and up to which offset
    of the pod's stdout and stderr it goes. An append writes the data, then the record: a crash
    between the two leaves bytes past the committed size, which the next append truncates
    away before the pump that resumed from the recorded offset writes them again. So a pump
    that resumes after a broker restart neither loses nor repeats a byte, and a chunk sent
    again (an overlap) is stored once."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._lock = threading.Lock()

    def rank_path(self, job_id: str, retry: int, rank: int) -> Path:
        if rank < 0:
            raise ValueError(f"bad rank {rank}")
        base = self.path(job_id, retry)
        return base if rank == 0 else base.with_name(f"{retry}.rank{rank}.log")

    def offsets(self, job_id: str, retry: int, rank: int) -> StreamOffsets:
        record = self.rank_path(job_id, retry, rank).with_suffix(".offsets")
        try:
            raw = record.read_bytes()[:_OFFSETS_LEN].split()
        except FileNotFoundError:
            return StreamOffsets()
        if len(raw) != 3 or not all(x.isdigit() for x in raw):
            return StreamOffsets()
        return StreamOffsets(int(raw[0]), int(raw[1]), int(raw[2]))

    def append_stream(
        self, job_id: str, retry: int, rank: int, stream: str, offset: int, data: bytes
    ) -> int:
        """Store `data`, which starts at byte `offset` of the pod's `stream`; returns the
        stream's stored offset afterwards. Bytes already stored are skipped; a gap (bytes
        never received) is marked in the log, never passed over silently."""
        target = self.rank_path(job_id, retry, rank)
        with self._lock:
            target.parent.mkdir(parents=True, exist_ok=True)
            have = self.offsets(job_id, retry, rank)
            stored = have.of(stream)
            end = offset + len(data)
            if end <= stored:
                return stored
            data = data[max(stored - offset, 0) :]
            if offset > stored:
                data = gap_marker(stream, stored, offset) + data
            fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size != have.size:
                    os.ftruncate(fd, have.size)  # an append the last writer never recorded
                os.pwrite(fd, data, have.size)
            finally:
                os.close(fd)
            new = {"size": have.size + len(data), "stdout": have.stdout, "stderr": have.stderr}
            new[stream] = end
            self._write_offsets(target, new)
            return new[stream]

    def note_raw(self, job_id: str, retry: int, rank: int, line: bytes) -> None:
        """Bytes of no stream in a rank's log, committed like data."""
        target = self.rank_path(job_id, retry, rank)
        with self._lock:
            target.parent.mkdir(parents=True, exist_ok=True)
            have = self.offsets(job_id, retry, rank)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, have.size)
                os.pwrite(fd, line, have.size)
            finally:
                os.close(fd)
            self._write_offsets(
                target,
                {"size": have.size + len(line), "stdout": have.stdout, "stderr": have.stderr},
            )

    def append(self, job_id: str, retry: int, data: bytes) -> None:
        """Rank 0's log, appended without stream offsets (kept committed if it has them)."""
        if not self.rank_path(job_id, retry, 0).with_suffix(".offsets").exists():
            super().append(job_id, retry, data)
            return
        self.note_raw(job_id, retry, 0, data)

    def read(self, job_id: str, retry: int, *, offset: int, limit: int) -> LogChunk:
        return self.read_rank(job_id, retry, 0, offset=offset, limit=limit)

    def note(self, job_id: str, retry: int, rank: int, text: str) -> None:
        """A line of the broker's own in a rank's log (an output loss), committed like data."""
        self.note_raw(job_id, retry, rank, f"\n[firepool: {text}]\n".encode())

    def read_rank(
        self, job_id: str, retry: int, rank: int, *, offset: int, limit: int
    ) -> LogChunk:
        """Like `read`, for one rank; only committed bytes are read (an append a crash left
        unrecorded is not: it is replaced when the pump resumes)."""
        target = self.rank_path(job_id, retry, rank)
        committed = (
            self.offsets(job_id, retry, rank).size
            if target.with_suffix(".offsets").exists()
            else None
        )
        try:
            with open(target, "rb") as log:
                size = os.fstat(log.fileno()).st_size
                if committed is not None:
                    size = min(size, committed)
                start = min(max(offset, 0), size)
                log.seek(start)
                return LogChunk(log.read(max(min(limit, size - start), 0)), start, size)
        except FileNotFoundError:
            return LogChunk(b"", 0, 0)

    @staticmethod
    def _write_offsets(target: Path, values: dict[str, int]) -> None:
        fd = os.open(target.with_suffix(".offsets"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, _OFFSETS.format(**values).encode(), 0)
        finally:
            os.close(fd)


def gap_marker(stream: str, start: int, end: int) -> bytes:
    return (
        f"\n[firepool: {end - start} bytes of {stream} (offsets {start}..{end}) were lost]\n"
    ).encode()

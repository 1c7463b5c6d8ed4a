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

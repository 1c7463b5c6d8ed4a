"""An attempt's stdout or stderr, kept on the pod up to a bound, with a marker past it.

The job writes into a FIFO, not a file: a copier thread moves what arrives into the stream's
file until the bound, then writes one marker line saying how much was kept and drops the rest
(still reading it, so the job never blocks on a full pipe). The pod's disk is then bounded
whatever a job prints, and a truncated log says so where its reader will look: the marker
travels to the broker with the output, so the job's stored log records the loss.

The agent opens the read end before the job starts (so the job's open of the write end does
not block) and waits, at the exit, for the copier to reach the end of the stream: the file is
complete before the exit is reported. A descendant that keeps the stream open past that wait
keeps being copied, until the pod's reset kills it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger("firepool.agent")

#: The default bound per stream and attempt: generous for real training logs, small enough
#: that a job printing in a loop cannot fill the node's disk.
DEFAULT_MAX_BYTES = 64 << 20
_CHUNK = 1 << 16


def marker(stream: str, kept: int) -> bytes:
    """The line that ends a truncated stream."""
    return (
        f"\n[firepool: {stream} truncated: the pod keeps at most {kept} bytes of it per "
        "attempt; the rest was dropped]\n"
    ).encode()


class BoundedStream:
    """One stream of one attempt: `path` is the file readers see, `pipe` the job's end."""

    def __init__(self, path: Path, stream: str, max_bytes: int) -> None:
        self.path = path
        self.stream = stream
        self.max_bytes = max_bytes
        self.pipe = path.with_name(f"{path.name}.pipe")
        self.dropped = 0
        self.done = threading.Event()
        #: Set once the copier runs (or will never run): a fast job's exit can reach the
        #: agent before the launch has started the copiers, and must wait for them.
        self._decided = threading.Event()
        self._thread: threading.Thread | None = None
        with contextlib.suppress(FileNotFoundError):
            self.pipe.unlink()
        os.mkfifo(self.pipe, 0o600)
        self._read = os.open(self.pipe, os.O_RDONLY | os.O_NONBLOCK)
        self._out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def start(self) -> None:
        """Copy, once the job holds the write end (before it, a read would see the end)."""
        os.set_blocking(self._read, True)
        self._thread = threading.Thread(
            target=self._copy, name=f"output-{self.stream}", daemon=True
        )
        self._thread.start()
        self._decided.set()

    def abandon(self) -> None:
        """The job never started: nothing will be written."""
        self._close()
        self._decided.set()

    def wait(self, timeout: float) -> bool:
        """Whether the stream reached its end (the file is complete) within `timeout`."""
        deadline = time.monotonic() + timeout
        if not self._decided.wait(timeout):
            return False
        if self._thread is None:
            return True
        return self.done.wait(max(0.0, deadline - time.monotonic()))

    def _copy(self) -> None:
        kept = os.fstat(self._out).st_size
        try:
            while data := os.read(self._read, _CHUNK):
                room = self.max_bytes - kept
                if room > 0:
                    os.write(self._out, data[:room])
                    kept += min(room, len(data))
                    if len(data) > room:
                        os.write(self._out, marker(self.stream, self.max_bytes))
                        kept = self.max_bytes  # nothing more is kept
                        self.dropped += len(data) - room
                else:
                    self.dropped += len(data)
        except OSError as err:  # the pod's disk full, the directory wiped by a reset
            log.warning("output %s stopped: %s", self.stream, err)
        finally:
            if self.dropped:
                log.warning("%s: dropped %d bytes past the bound", self.path, self.dropped)
            self._close()
            self.done.set()

    def _close(self) -> None:
        for fd in (self._read, self._out):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            self.pipe.unlink()

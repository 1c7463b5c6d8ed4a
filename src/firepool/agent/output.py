"""An attempt's stdout or stderr, kept on the pod up to a bound, with a marker past it.

The job writes into an anonymous pipe, not a file: the agent's copier thread (one for every
stream, `_Pump`) moves what arrives into the stream's file until the bound, then writes one
marker line saying how much was kept and drops the rest (still reading it, so the job never
blocks on a full pipe). The pod's disk is then bounded whatever a job prints, and a truncated
log says so where its reader will look: the marker travels to the broker with the output, so
the job's stored log records the loss.

The pipe has no name: the agent hands its write end to the warm interpreter with the spawn
request (see zygote.py), so nothing is created in the file system for it, and the job holds a
descriptor, never a path into the agent's log directory. The file, and the attempt's log
directory, are created on the first byte: most short jobs print nothing to stderr, many
nothing at all, and each file made and wiped is an inode allocated and freed on the pod's disk
per attempt. Every reader takes a missing file for an empty stream.

The agent keeps its copy of the write end until the job holds one (the copier must not see the
end of the stream before), and waits, at the exit, for the copier to reach that end: the file
is complete before the exit is reported. A descendant that keeps the stream open past that
wait keeps being copied, until the pod's reset kills it; the reset first seals the stream
(`seal`), so output arriving then may go on into a file already open, which the reset removes,
but never makes a new one beside the files it wipes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
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
    """One stream of one attempt: `path` is the file readers see (once there is output),
    `writer` the job's end of the pipe until the job holds it."""

    def __init__(self, path: Path, stream: str, max_bytes: int) -> None:
        self.path = path
        self.stream = stream
        self.max_bytes = max_bytes
        self.dropped = 0  # past the bound
        self.discarded = 0  # after the seal, with no file to keep it in
        self.done = threading.Event()
        self._read, writer = os.pipe2(os.O_CLOEXEC)
        self.writer: int | None = writer
        self._out: int | None = None
        self._kept = 0
        #: Held while the file is created, so `seal` cannot slip between the check and it.
        self._create = threading.Lock()
        self._sealed = False

    def start(self) -> None:
        """Copy, once the job holds the write end: ours is closed, so the end of the stream
        comes when the job and every descendant holding it have closed theirs."""
        self._close_writer()
        _PUMP.add(self._read, self)

    def abandon(self) -> None:
        """The job never started: nothing will be written."""
        self._close_writer()
        self._close()
        self.done.set()

    def wait(self, timeout: float) -> bool:
        """Until the copier reached the end of the stream. Also before `start`: the job's exit
        can be reported before the launch has started the copier."""
        return self.done.wait(timeout)

    def seal(self) -> None:
        """No file is created from now on (the reset is about to wipe the log directory);
        output with no file yet is dropped, as the reset would remove it anyway."""
        with self._create:
            self._sealed = True

    def copy_chunk(self) -> bool:
        """Move what the pipe holds (one read) into the file; False at the end of the stream,
        or when the copy cannot go on (the pod's disk full)."""
        try:
            data = os.read(self._read, _CHUNK)
            if data:
                self._keep(data)
        except OSError as err:
            log.warning("output %s stopped: %s", self.stream, err)
            return False
        return bool(data)

    def finish(self) -> None:
        """The stream ended (the pump no longer watches it)."""
        if self.dropped:
            log.warning("%s: dropped %d bytes past the bound", self.path, self.dropped)
        if self.discarded:
            log.warning("%s: %d bytes came after the reset", self.path, self.discarded)
        self._close()
        self.done.set()

    def _keep(self, data: bytes) -> None:
        if self._out is None and not self._sealed:
            self._out = self._open_file()
            if self._out is not None:
                self._kept = os.fstat(self._out).st_size
        if self._out is None:
            self.discarded += len(data)
            return
        room = self.max_bytes - self._kept
        if room > 0:
            os.write(self._out, data[:room])
            self._kept += min(room, len(data))
            if len(data) > room:
                os.write(self._out, marker(self.stream, self.max_bytes))
                self._kept = self.max_bytes  # nothing more is kept
                self.dropped += len(data) - room
        else:
            self.dropped += len(data)

    def _open_file(self) -> int | None:
        with self._create:
            if self._sealed:
                return None
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
            try:
                return os.open(self.path, flags, 0o600)
            except FileNotFoundError:  # the attempt's first output: its directory too
                self.path.parent.mkdir(parents=True, exist_ok=True)
                return os.open(self.path, flags, 0o600)

    def _close_writer(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(OSError):
                os.close(self.writer)
            self.writer = None

    def _close(self) -> None:
        for fd in (self._read, self._out):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


class _Pump:
    """The one thread that copies every started stream, woken by epoll when a pipe has data
    or lost its last writer. A thread per stream cost two thread starts and exits per
    attempt (a tenth of a millisecond each), for streams that mostly carry a line or nothing;
    an agent runs one attempt at a time, so one copier keeps up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[int, BoundedStream] = {}
        self._epoll: select.epoll | None = None

    def add(self, fd: int, stream: BoundedStream) -> None:
        with self._lock:
            if self._epoll is None:
                self._epoll = select.epoll()
                threading.Thread(target=self._run, args=(self._epoll,), name="output",
                                 daemon=True).start()  # fmt: skip
            self._streams[fd] = stream
            self._epoll.register(fd, select.EPOLLIN)

    def _run(self, epoll: select.epoll) -> None:
        while True:
            for fd, _events in epoll.poll():
                with self._lock:
                    stream = self._streams.get(fd)
                if stream is None or self._copy(stream):
                    continue
                with self._lock:  # before the descriptor is closed and its number reused
                    epoll.unregister(fd)
                    del self._streams[fd]
                stream.finish()

    @staticmethod
    def _copy(stream: BoundedStream) -> bool:
        try:
            return stream.copy_chunk()
        except Exception:  # one stream's bug must not stop every other stream's copy
            log.exception("output %s failed", stream.stream)
            return False


_PUMP = _Pump()

"""A snapshot of /proc: who is whose parent, in which session, in which state.

Reset and delete decide what to kill and whether anything survived from one pass over
`/proc/<pid>/stat`. Reading stat is cheap (one small read per process), so a full snapshot
costs about a millisecond on a quiet host; `environ` is read only for the few processes a
caller asks about, because it is the expensive part. The agent's reset, which takes a full
snapshot per attempt, reads it through a `StatReader`: the same processes, a third of the cost.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import threading
from collections.abc import Collection, Iterable
from typing import NamedTuple

_CLK_TCK = os.sysconf("SC_CLK_TCK")


class Proc(NamedTuple):
    """A tuple, not a dataclass: a snapshot builds one per process on the host, per reset."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_ticks: int

    @property
    def dead(self) -> bool:
        """A zombie has released its memory, files and devices; only its pid is left."""
        return self.state in ("Z", "X", "x")


def read_small(path: str) -> bytes:
    """A small kernel file (/proc, /sys/fs/cgroup) whole, in the fewest system calls: open,
    read to the end, close. Python's `open()` adds an fstat, an isatty ioctl and seeks per
    file, which the reset pays on every file it reads, every attempt."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _parse_stat(pid: int, raw: bytes) -> Proc | None:
    # comm may hold spaces and parentheses: split after the last ')'; start_ticks is the 20th
    # field after it, the rest is not needed
    tail = raw[raw.rfind(b")") + 2 :].split(maxsplit=20)
    try:
        return Proc(pid, int(tail[1]), int(tail[2]), int(tail[3]), tail[0].decode(), int(tail[19]))
    except (IndexError, ValueError):
        return None


def _open_stat(pid: int) -> tuple[int, bytes] | None:
    """The process's `stat` opened and read once: (the open descriptor, its text); None when
    the process is gone. The caller closes the descriptor or keeps it for re-reading."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return fd, os.read(fd, 4096)
    except OSError:
        os.close(fd)
        return None


def read_proc(pid: int) -> Proc | None:
    opened = _open_stat(pid)
    if opened is None:
        return None
    fd, raw = opened
    os.close(fd)
    return _parse_stat(pid, raw)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name[0].isdigit()]


def snapshot() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for pid in _pids():
        proc = read_proc(pid)
        if proc is not None:
            procs[pid] = proc
    return procs


class StatReader:
    """Snapshots for a caller that takes one again and again (the agent's reset, once per
    attempt), through descriptors on each process's `stat` kept open between them.

    A pread at offset 0 makes the kernel write the file afresh, for a third of the cost of
    open, read and close (the path walk and the file's set-up and tear-down are most of it).
    A descriptor follows its process, not its pid: once that process is reaped, reading it
    fails (ESRCH) and the pid is opened again by path, so a reused pid is never read as the
    process that had it before; pids gone from /proc are let go at each snapshot. At most
    `limit` descriptors are kept (a quarter of the open-file limit, at most 1024 by default):
    past that, processes are read as `snapshot` reads them.

    With `older_than`, a process that started before that moment is left out and not read
    again while it lives: a reset asks for processes its pod could have started, and a
    process older than the pod can be neither its descendant nor a carrier of its marker
    (start times never change). Such a process is remembered by a pidfd, and one poll over
    those per snapshot tells which have exited (then their pid is read afresh, whoever has it
    now). On a host of many pods this skips most of /proc at every reset."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is None:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            limit = 1024 if soft == resource.RLIM_INFINITY else min(1024, soft // 4)
        self.limit = limit
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()
        #: pid -> pidfd of a live process older than `_older_than` (left out of snapshots).
        self._old: dict[int, int] = {}
        self._old_by_fd: dict[int, int] = {}
        self._older_than: int | None = None
        self._exits = select.poll()

    def snapshot(
        self, older_than: int | None = None, include: Collection[int] = ()
    ) -> dict[int, Proc]:
        """Every process on the host; with `older_than` (clock ticks since boot, as
        `Proc.start_ticks`), those that started before it are left out, except the pids in
        `include`, which are always read."""
        with self._lock:
            if older_than != self._older_than:
                self._forget_old()
                self._older_than = older_than
            self._let_go_of_exited()
            procs: dict[int, Proc] = {}
            pids = _pids()
            for pid in pids:
                if pid in self._old and pid not in include:
                    continue
                raw = self._read(pid)
                proc = _parse_stat(pid, raw) if raw is not None else None
                if proc is None:
                    continue
                if (
                    older_than is not None
                    and proc.start_ticks < older_than
                    and not proc.dead
                    and pid not in include
                    and self._remember_old(pid)
                ):
                    continue
                procs[pid] = proc
            for pid in self._fds.keys() - set(pids):
                os.close(self._fds.pop(pid))
            return procs

    def _remember_old(self, pid: int) -> bool:
        """Keep a pidfd on the process just read through its kept `stat` descriptor; False
        (then it stays in the snapshot) when it cannot be kept or is gone. The pidfd is opened
        by pid, so it is the process read only if that one was not reaped meanwhile: a read of
        its `stat` descriptor after the open proves it (it fails once the process is reaped,
        and a pid is not reused before)."""
        fd = self._fds.get(pid)
        if fd is None:  # past the limit: read by path every time
            return False
        try:
            pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):  # no pidfds here (old kernel, seccomp): read it
            return False
        try:
            os.pread(fd, 1, 0)
        except OSError:
            os.close(pidfd)
            return False
        del self._fds[pid]
        os.close(fd)
        self._old[pid] = pidfd
        self._old_by_fd[pidfd] = pid
        self._exits.register(pidfd, select.POLLIN)
        return True

    def _let_go_of_exited(self) -> None:
        for pidfd, _events in self._exits.poll(0):
            self._exits.unregister(pidfd)
            del self._old[self._old_by_fd.pop(pidfd)]
            os.close(pidfd)

    def _forget_old(self) -> None:
        for pidfd in self._old_by_fd:
            self._exits.unregister(pidfd)
            os.close(pidfd)
        self._old.clear()
        self._old_by_fd.clear()

    def _read(self, pid: int) -> bytes | None:
        fd = self._fds.get(pid)
        if fd is not None:
            try:
                return os.pread(fd, 4096, 0)
            except OSError:  # that process is gone; the pid may be another's by now
                del self._fds[pid]
                os.close(fd)
        opened = _open_stat(pid)
        if opened is None:
            return None
        fd, raw = opened
        if len(self._fds) + len(self._old) < self.limit:
            self._fds[pid] = fd
        else:
            os.close(fd)
        return raw

    @property
    def held(self) -> int:
        return len(self._fds) + len(self._old)

    @property
    def left_out(self) -> int:
        """Processes remembered as older than the last `older_than` (not read)."""
        return len(self._old)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._forget_old()


def descendants(procs: dict[int, Proc], roots: Iterable[int]) -> set[int]:
    """Every process below `roots` (not the roots themselves)."""
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def environ_has(pid: int, needle: bytes) -> bool:
    """True if the process's initial environment holds `needle` (e.g. b"K=V")."""
    chunks = []
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    except OSError:
        return False
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError:
        return False
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return (b"\0" + needle + b"\0") in (b"\0" + data + b"\0")


def thread_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def real_uid(pid: int) -> int | None:
    """The real uid from /proc/<pid>/status (the directory's owner is root for a process that
    changed its uid and so became non-dumpable)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def known_here_as(pid_ns: str, pid: int) -> int | None:
    """The pid that this /proc shows for the process that PID namespace `pid_ns` (a
    `/proc/<pid>/ns/pid` link, as read inside it) calls `pid`, or None if there is none: a job
    in its pod's namespace knows itself by another pid than its agent and broker do."""
    for found in snapshot():
        try:
            if os.readlink(f"/proc/{found}/ns/pid") != pid_ns:
                continue
            with open(f"/proc/{found}/status", "rb") as fh:
                nspid = next(line for line in fh if line.startswith(b"NSpid:"))
        except (OSError, StopIteration):
            continue
        if int(nspid.split()[-1]) == pid:
            return found
    return None


def boot_ticks_now() -> int:
    """The current time in the clock `start_ticks` uses (clock ticks since boot)."""
    with open("/proc/uptime", "rb") as fh:
        uptime = float(fh.read().split()[0])
    return int(uptime * _CLK_TCK)


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> bool:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def killpg_quietly(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def alive(pid: int) -> bool:
    proc = read_proc(pid)
    return proc is not None and not proc.dead

"""A snapshot of /proc: who is whose parent, in which session, in which state.

Reset and delete decide what to kill and whether anything survived from one pass over
`/proc/<pid>/stat`. Reading stat is cheap (one small read per process), so a full snapshot
costs about a millisecond on a quiet host; `environ` is read only for the few processes a
caller asks about, because it is the expensive part.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass

_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Proc:
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


def read_proc(pid: int) -> Proc | None:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # comm may hold spaces and parentheses: split after the last ')'
    tail = raw[raw.rfind(b")") + 2 :].split()
    try:
        return Proc(
            pid=pid,
            ppid=int(tail[1]),
            pgid=int(tail[2]),
            sid=int(tail[3]),
            state=tail[0].decode(),
            start_ticks=int(tail[19]),
        )
    except (IndexError, ValueError):
        return None


def snapshot() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if name[0].isdigit():
            proc = read_proc(int(name))
            if proc is not None:
                procs[proc.pid] = proc
    return procs


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

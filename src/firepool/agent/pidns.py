"""The pod's PID namespace: the warm interpreter is its init, every job process lives in it.

The agent starts the zygote as the first process of a new PID namespace
(`new_namespace_for_children`), then takes its own `pid_for_children` back (`back_to`), so
nothing else it starts (installers) lands there. Jobs, forked by the zygote, are born in the
namespace: they cannot name, let alone signal, a process outside it (kill(2) of the agent's or
another pod's pid fails with ESRCH), and each job gets a `/proc` of the namespace in a mount
namespace of its own (`give_job_own_proc`), so it lists only its pod's processes, under the
pids it knows them by.

The agent keeps working in host pids: it sees every process of the namespace in its own /proc,
so reset's sweep (descendants of the agent, cgroup members, the environment marker) is
unchanged; orphans re-parent to the zygote, as its child subreaper role already had them do; and
if the zygote dies the kernel kills everything left in the namespace. The zygote translates the
pids its forks return into host pids (`host_pid`) before it reports them.

Stdlib only: the agent calls this before it imports anything heavy.
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def new_namespace_for_children() -> int | None:
    """Make the next process this one starts the init of a new PID namespace; returns a
    descriptor on our own namespace for `back_to`, or None where the host gives no namespace
    (not root, or a sandbox forbids it)."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    if _libc.unshare(CLONE_NEWPID) != 0:
        os.close(own)
        return None
    return own


def back_to(own: int) -> None:
    """New children go to our own PID namespace again (raises if the kernel refuses)."""
    try:
        _check(_libc.setns(own, CLONE_NEWPID), "setns(own PID namespace)")
    finally:
        os.close(own)


def is_namespace_init() -> bool:
    """True in the init of a PID namespace below the host's (the pod's zygote)."""
    return os.getpid() == 1


def host_pid(pid: int) -> int:
    """The pid that the agent (outside the namespace) knows our child `pid` by: the /proc this
    process sees is the agent's, so a pidfd's fdinfo there speaks the agent's pids."""
    fd = os.pidfd_open(pid)
    try:
        info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            lines = os.read(info, 4096).splitlines()  # a few short lines; once per job
        finally:
            os.close(info)
        for line in lines:
            if line.startswith(b"Pid:"):
                found = int(line.split()[1])
                if found > 0:
                    return found
    finally:
        os.close(fd)
    raise OSError(f"no host pid for {pid} in this kernel's pidfd fdinfo")


def _mount(
    source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None
) -> None:
    _check(_libc.mount(source, target, fstype, flags, data), f"mount {target.decode()}")


def give_job_own_proc(resolv_conf: str | None = None) -> None:
    """In the job's child, still root: a mount namespace of its own (a copy of the pod's, at
    launch, when the agent has finished changing it) whose /proc is the PID namespace's, with
    `hidepid=invisible` (the zygote, root, stays hidden). Made private first, so the new /proc
    can never propagate back to the agent, whose /proc must stay the host's. `resolv_conf`
    is bound read-only over /etc/resolv.conf here (an egress pod's resolver), where the agent's
    installers, in the host's network, keep the host's."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
    _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"hidepid=invisible")
    if not resolv_conf:
        return
    target = os.path.realpath("/etc/resolv.conf").encode()
    if os.path.isfile(target):
        _mount(resolv_conf.encode(), target, None, MS_BIND, None)
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def can_give_own_proc() -> bool:
    """Whether a job here could get its own /proc: tried once, in a throw-away child (a
    container may allow the PID namespace yet refuse a new procfs, e.g. in a user namespace
    whose /proc is partly masked)."""
    pid = os.fork()
    if pid == 0:
        try:
            give_job_own_proc()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def same_namespace(pid_a: int | str, pid_b: int | str, kind: str = "pid") -> bool | None:
    """Whether two processes share a namespace of `kind` (`pid`, `net`...; None if either
    cannot be inspected)."""
    try:
        return os.readlink(f"/proc/{pid_a}/ns/{kind}") == os.readlink(f"/proc/{pid_b}/ns/{kind}")
    except OSError:
        return None

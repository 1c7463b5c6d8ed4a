"""Verified reset: prove the pod holds nothing of the last attempt, or say what it still holds.

Processes. The targets are every descendant of the agent (the agent and the zygote are child
subreapers, so `setsid` and double-forked grandchildren stay below them) plus every member of
the pod's cgroups (a ledger that survives re-parenting), except the zygote. All are SIGKILLed,
repeatedly (a forking process cannot outrun a SIGKILL round for long), until
a /proc snapshot finds none alive; a process in uninterruptible sleep gets a bounded wait
(`verify_timeout_s`). Where the pod's processes are confined (`pids_confined`: jobs live in the
pod's PID namespace and its cgroup, as a uid that can leave neither), the killing rounds read
only the cgroup's member list, not the whole host's /proc; one full snapshot still confirms the
end (and feeds the marker check), and anything it finds alive sends reset back to the full
rounds. Separately, any process started since the pod came up that carries the pod's
environment marker but is *not* ours (it escaped through something outside the pod, e.g. a
daemon that runs what it is handed with the job's environment, which no namespace or cgroup of
the pod's stops) is not touched but reported: we cannot prove what it holds, so the reset is
`unclean`.

Files. The package directory, per-attempt GPU accounting files, logs, volumes marked for wiping
and the scratch spaces are emptied, then checked empty; the directories the job's user owns get
their owner and mode back. Read-only caches (the package cache, installed requirements,
configured caches) are kept. In weak mode whatever the pod's uid owns in the host's shared
directories (/tmp, /var/tmp, /dev/shm...) is removed and checked gone.

Kernel objects. SysV shared memory, semaphores and message queues, and POSIX message queues,
are removed (all of them in the pod's own IPC namespace; in weak mode those the pod's uid owns
or created) and checked gone. POSIX shared memory is a file in /dev/shm, wiped with the files.
No socket may be left: in the pod's own network namespace none at all that a descriptor holds
(a listener or a connection), in the host's none of the job uid's.
The set of mount points must be the one the agent set up (a leftover mount means something
escaped our accounting), and the warm interpreter must still run only the threads it had.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from firepool.agent import isolation, netns, procfs
from firepool.agent.cgroups import PodCgroups
from firepool.agent.emptying import empty_dir
from firepool.agent.isolation import Scratch
from firepool.protocol import ResetResult


@dataclass
class ResetContext:
    agent_pid: int
    keep_pids: set[int]
    cgroups: PodCgroups
    scratch: Scratch
    marker: bytes
    pod_start_ticks: int
    dirs_to_empty: Sequence[Path]
    verify_timeout_s: float
    faults: Sequence[str] = ()
    steps_ms: dict[str, float] = field(default_factory=dict)
    #: The job's (uid, gid), and directories it owns whose owner and mode reset restores.
    job_user: tuple[int, int] | None = None
    owned_dirs: Sequence[Path] = ()
    #: True: every SysV object in sight is the pod's; False: only the job uid's are.
    ipc_private: bool = False
    #: Host directories shared with other users (weak mode) to sweep for the job uid's files.
    shared_dirs: Sequence[str] = ()
    #: That uid (the job's; in a container, the agent's own); None: no sweep.
    sweep_uid: int | None = None
    mounts_expected: frozenset[str] | None = None
    zygote_threads: int | None = None
    #: Unmounts what was attached for the attempt (its checkpoint directory).
    detach: Callable[[], None] | None = None
    #: A descriptor on the IPC namespace's POSIX message queues (isolation.open_mqueues).
    mqueues: int | None = None
    #: Every job process is in the pod's PID namespace and in `cgroups` (see module docstring).
    pids_confined: bool = False
    #: The pod's own helpers that outlive attempts (an egress pod's NAT): never killed.
    services: frozenset[int] = frozenset()
    #: The `/proc/<pid>/net` of the namespace the jobs' sockets live in, and whose sockets
    #: count: None every socket there (the pod's own namespace), else only the job uid's (the
    #: host's, shared with everyone). None: not checked (jobs run as the agent's own user).
    net_dir: str | None = None
    sockets_uid: int | None = None


#: How much longer the `slow-reset` test hook makes each reset.
SLOW_RESET_S = 1.5

#: The reset's view of /proc, read again at every reset (see procfs.StatReader).
_PROCS = procfs.StatReader()


def _tree(ctx: ResetContext, procs: dict[int, procfs.Proc], members: set[int]) -> set[int]:
    targets = procfs.descendants(procs, [ctx.agent_pid]) | members
    return targets - ctx.keep_pids - ctx.services - {ctx.agent_pid}


def _snapshot(ctx: ResetContext, members: set[int]) -> dict[int, procfs.Proc]:
    """The processes the reset must see: every one that started since the agent or the pod
    did (the agent's descendants, and the candidates for the marker check, are among them),
    and every member of the pod's cgroups, however old (one could be moved in)."""
    agent = procfs.read_proc(ctx.agent_pid)
    since = min(ctx.pod_start_ticks, agent.start_ticks) if agent is not None else None
    return _PROCS.snapshot(older_than=since, include=members)


def _reap_own_zombies(ctx: ResetContext, procs: dict[int, procfs.Proc]) -> None:
    for proc in procs.values():
        if proc.ppid == ctx.agent_pid and proc.dead and proc.pid not in ctx.keep_pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(proc.pid, os.WNOHANG)


def _kill_confined(ctx: ResetContext, killed: set[int], deadline: float) -> None:
    """Killing rounds over the cgroup's members alone, until none is alive or time is up."""
    pause = 0.0005
    spared = ctx.keep_pids | ctx.services | {ctx.agent_pid}
    while True:
        live = [
            pid
            for pid in ctx.cgroups.members() - spared
            if (proc := procfs.read_proc(pid)) is not None and not proc.dead
        ]
        if not live or time.monotonic() > deadline:
            return
        for pid in live:
            procfs.kill_quietly(pid)
            killed.add(pid)
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def kill_attempt_processes(
    ctx: ResetContext,
) -> tuple[int, list[procfs.Proc], dict[int, procfs.Proc], set[int]]:
    """SIGKILL the whole attempt tree until none is alive.

    Returns (processes killed, survivors, the last /proc snapshot, the tree found in it)."""
    killed: set[int] = set()
    deadline = time.monotonic() + ctx.verify_timeout_s
    if ctx.pids_confined:
        begun = time.perf_counter()
        _kill_confined(ctx, killed, deadline)
        ctx.steps_ms["kill_cgroup"] = round((time.perf_counter() - begun) * 1000, 3)
    pause = 0.0005
    while True:
        members = ctx.cgroups.members()
        procs = _snapshot(ctx, members)
        tree = _tree(ctx, procs, members)
        live = [procs[p] for p in tree if p in procs and not procs[p].dead]
        _reap_own_zombies(ctx, procs)
        if not live:
            return len(killed), [], procs, tree
        if time.monotonic() > deadline:
            return len(killed), live, procs, tree
        for proc in live:
            procfs.kill_quietly(proc.pid)
            killed.add(proc.pid)
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def escaped_processes(
    ctx: ResetContext, procs: dict[int, procfs.Proc], tree: set[int]
) -> list[int]:
    """Processes outside the pod's tree (`_tree` of the same snapshot, as the killing rounds
    last found it) that still carry the pod's marker."""
    ours = tree | ctx.keep_pids | ctx.services | {ctx.agent_pid}
    return [
        p.pid
        for p in procs.values()
        if p.pid not in ours
        and not p.dead
        and p.start_ticks >= ctx.pod_start_ticks
        and procfs.environ_has(p.pid, ctx.marker)
    ]


def _is_empty(path: Path) -> bool:
    with os.scandir(path) as it:
        return next(it, None) is None


def _restore_owned(ctx: ResetContext) -> list[str]:
    """Owner and mode of the job's own directories back, and (weak mode) the job uid's files
    gone from the host's shared directories."""
    problems: list[str] = []
    if ctx.job_user is not None:
        uid, gid = ctx.job_user
        for path in ctx.owned_dirs:
            if ctx.scratch.is_mounted(path):
                continue
            try:
                os.chown(path, uid, gid, follow_symlinks=False)
                os.chmod(path, 0o700, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                problems.append(f"cannot restore {path}: {exc}")
    if ctx.shared_dirs and ctx.sweep_uid is not None:
        roots, uid = list(ctx.shared_dirs), ctx.sweep_uid
        left = isolation.sweep_owned(uid, roots) + isolation.owned_leftovers(uid, roots)
        if left:
            problems.append("files of the pod's user left in shared dirs: " + ", ".join(left[:5]))
    return problems


def _kernel_objects(ctx: ResetContext) -> list[str]:
    problems: list[str] = []
    owner = None if ctx.ipc_private else (ctx.job_user[0] if ctx.job_user else -1)
    if owner != -1:
        objects = isolation.sysv_objects(owner)
        if objects:
            isolation.remove_sysv(objects)
            left = isolation.sysv_objects(owner)
            if left:
                problems.append(f"SysV IPC objects survive removal: {left[:5]}")
        if ctx.mqueues is not None:
            try:
                queues = isolation.mqueues(ctx.mqueues, owner)
                if queues:
                    isolation.remove_mqueues(ctx.mqueues, queues)
                    left_queues = isolation.mqueues(ctx.mqueues, owner)
                    if left_queues:
                        problems.append(f"message queues survive removal: {left_queues[:5]}")
            except OSError as exc:
                problems.append(f"cannot sweep POSIX message queues: {exc}")
    if ctx.mounts_expected is not None:
        mountinfo = procfs.read_small("/proc/self/mountinfo").decode()
        now = frozenset(line.split()[4] for line in mountinfo.splitlines())
        if now != ctx.mounts_expected:
            extra = sorted(now - ctx.mounts_expected)[:5]
            gone = sorted(ctx.mounts_expected - now)[:5]
            problems.append(f"mounts changed: added {extra}, missing {gone}")
    if ctx.zygote_threads is not None:
        for pid in ctx.keep_pids:
            threads = procfs.thread_count(pid)
            if threads != ctx.zygote_threads:
                problems.append(
                    f"the warm interpreter runs {threads} threads, not {ctx.zygote_threads}"
                )
    return problems


def socket_problems(net_dir: str | None, uid: int | None) -> list[str]:
    """A socket still held once every job process is gone means one escaped the kill rounds
    (or the kernel keeps one for a process we did not see): the pod is not clean. Arguments
    as ResetContext's `net_dir` and `sockets_uid`."""
    if net_dir is None:
        return []
    try:
        held = netns.held_sockets(net_dir, uid)
    except OSError as exc:
        return [f"cannot list the pod's sockets: {exc}"]
    return ["sockets left open: " + ", ".join(held[:5])] if held else []


def verified_reset(ctx: ResetContext) -> ResetResult:
    start = time.perf_counter()
    steps = ctx.steps_ms
    problems: list[str] = []

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        steps[name] = round((now - since) * 1000, 3)
        return now

    t = start
    if "slow-reset" in ctx.faults:  # test hook: a reset as slow as a large scratch space's
        time.sleep(SLOW_RESET_S)
    killed, survivors, procs, tree = kill_attempt_processes(ctx)
    if survivors:
        problems.append(
            "processes survived SIGKILL: "
            + ", ".join(f"{p.pid} (state {p.state})" for p in survivors[:10])
        )
    t = lap("kill", t)
    escaped = escaped_processes(ctx, procs, tree)
    if escaped:
        problems.append(
            "processes outside the pod carry its marker: " + ", ".join(map(str, escaped[:10]))
        )
    t = lap("verify", t)
    removed = 0
    if not survivors:  # never pull files from under a live process
        if ctx.detach is not None:
            try:
                ctx.detach()
            except OSError as exc:
                problems.append(f"cannot detach the attempt's directories: {exc}")
        for path in ctx.dirs_to_empty:
            try:
                removed += empty_dir(path)
                if not _is_empty(path):
                    problems.append(f"{path} is not empty after wiping")
            except OSError as exc:
                problems.append(f"cannot empty {path}: {exc}")
        t = lap("files", t)
        try:
            ctx.scratch.wipe_mounts()
        except OSError as exc:
            problems.append(f"cannot renew scratch tmpfs: {exc}")
        t = lap("scratch", t)
        problems += _restore_owned(ctx)
        problems += _kernel_objects(ctx)
        t = lap("objects", t)
        problems += socket_problems(ctx.net_dir, ctx.sockets_uid)
        t = lap("sockets", t)
    if "verify" in ctx.faults:
        problems.append("injected verification failure (test hook)")
    if "die-in-reset" in ctx.faults:  # test hook: the agent dies before it can answer
        os.kill(ctx.agent_pid, signal.SIGKILL)
    return ResetResult(
        clean=not problems,
        reason="; ".join(problems) or None,
        duration_ms=round((time.perf_counter() - start) * 1000, 3),
        killed=killed,
        files_removed=removed,
        steps_ms=steps,
    )

"""The warm interpreter: a single-threaded process that imports the pool's heavy modules once
and forks every attempt from itself.

Why a separate process rather than forking the agent: the agent serves HTTP from threads, and a
fork of a threaded process can inherit locks held by threads that do not exist in the child.
The zygote has exactly one thread, imports only the stdlib and the preloaded modules, and is the
parent (and child subreaper) of every job process, so it reaps them and reports exit status
and peak RSS to the agent over a socketpair, one JSON object per line.

Requests:  {"op": "join", "cgroup_procs": [...]}   (once, before any spawn)
           {"op": "spawn", "id", "mode": "fork"|"exec", "argv", "env", "cwd",
            "sys_path": [...], "rlimit_as": int|null, "uid": int|null, "gid": int|null,
            "rlimits": {"NOFILE": int, "NPROC": int}, "own_proc": bool, "spare_ok": bool}
           {"op": "prefork", "own_proc": bool}   (fork the next spawn's child ahead of it)
           {"op": "discard"}                     (let that child go unused)
           A spawn line comes with two descriptors (SCM_RIGHTS, sent with the line in one
           sendmsg): the write ends of the job's stdout and stderr pipes, in that order. The
           child makes them its 1 and 2; the zygote closes its copies once it forked, so the
           agent, which closes its own at `spawned`, sees the end of each stream when the job
           and its descendants are done with it. No path is opened on the job's behalf.
           A spawn takes the spare child when one is prepared and suits it (`Spare`), and
           forks afresh otherwise; either way the answer is the same.
Events:    {"ev": "ready", "pid", "modules", "failed", "own_proc"}
           {"ev": "joined", "ok", "error"}
           {"ev": "spawned", "id", "pid", "t"} | {"ev": "spawn_error", "id", "message"}
           {"ev": "exit", "id", "pid", "status", "maxrss_kib", "t", "t0"}
A job's "pid" is the one the agent knows it by, also when the zygote is the init of the pod's
PID namespace (see pidns.py) and its forks return the namespace's pids.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import gc
import importlib
import json
import os
import resource
import runpy  # imported here, not in the child: together they cost ~30 ms per job otherwise
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from firepool.agent import netns, pidns
from firepool.agent.entry import python_entry, sys_argv_for

#: Room for the descriptors of one sendmsg (the kernel ends a read after a message carrying
#: descriptors, so one read never holds two spawn requests' worth).
_FD_SIZE = array.array("i").itemsize
_FDS_SPACE = socket.CMSG_SPACE(8 * _FD_SIZE)

PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38


_libc = ctypes.CDLL(None, use_errno=True)

#: The process name (/proc/<pid>/comm, what ps and top show) of a spare while it waits: an
#: operator, or a test counting a pod's job processes, can tell it from a job.
SPARE_NAME = "firepool-spare"


def set_subreaper() -> bool:
    """Orphans (setsid'd or double-forked grandchildren) are re-parented to us, not to init,
    so they stay visible as our descendants in /proc until reset kills them."""
    try:
        return bool(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def preload(modules: list[str]) -> tuple[list[str], dict[str, str]]:
    loaded: list[str] = []
    failed: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as exc:  # a missing optional module must not kill the pod
            failed[name] = f"{type(exc).__name__}: {exc}"
    # Objects that exist now are shared copy-on-write with every child; keep the collector
    # from touching (and so copying) them.
    gc.collect()
    gc.freeze()
    return loaded, failed


def start_process(
    preload: Sequence[str],
    pid_namespace: bool = False,
    net_namespace: bool = False,
    resolv_conf: str | None = None,
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start a zygote; returns it and our end of its socketpair. Stdlib only, so the agent can
    call it before importing anything heavy and let both start-ups overlap. With
    `pid_namespace`, the zygote is the init of a new PID namespace where the host permits one,
    with `net_namespace` it lives in a network namespace of its own (the agent checks which it
    got: `pidns.same_namespace`). Jobs given their own /proc see
    `resolv_conf` as /etc/resolv.conf (an egress pod's resolver)."""
    ours, theirs = socket.socketpair()  # made in the host's namespace: the agent's end stays
    argv = [sys.executable, "-m", "firepool.agent.zygote", str(theirs.fileno()), ",".join(preload)]
    if resolv_conf:
        argv.append(resolv_conf)
    own = pidns.new_namespace_for_children() if pid_namespace else None
    net = netns.enter_new() if net_namespace else None
    try:
        proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
    finally:
        if net is not None:
            netns.leave(net)
        if own is not None:
            pidns.back_to(own)
    theirs.close()
    return proc, ours


# --------------------------------------------------------------------------- in the child


#: The resolver file jobs see as /etc/resolv.conf (an egress pod's; see `start_process`).
RESOLV_CONF: str | None = None


def _child_prepare(own_proc: bool, cgroups: list[str]) -> None:
    """The part of a child's set-up that no request changes: a spare does it ahead of time."""
    os.setsid()
    if own_proc:
        pidns.give_job_own_proc(RESOLV_CONF)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _write("/proc/self/oom_score_adj", "0")  # the zygote is shielded, the job is not
    for path in cgroups:  # only when the zygote could not join them itself
        _write(path, str(os.getpid()))


def _child_setup(req: dict[str, Any], errpipe: int, streams: tuple[int, int]) -> None:
    """The request's part: limits, streams, user, directory. Every descriptor but the job's
    0, 1, 2 and `errpipe` is closed here (the zygote's socket, a spare's channel)."""
    limit = req.get("rlimit_as")
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(streams[0], 1)  # received descriptors are >= 3: 0, 1 and 2 were taken
    os.dup2(streams[1], 2)
    os.closerange(3, errpipe)
    os.closerange(errpipe + 1, 1 << 16)
    for name, value in (req.get("rlimits") or {}).items():
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (int(value), int(value)))
    _drop_privileges(req.get("uid"), req.get("gid"))
    os.chdir(req["cwd"])


def _drop_privileges(uid: int | None, gid: int | None) -> None:
    """Become the pod's unprivileged user for good (real, effective and saved ids, no
    supplementary groups) and forbid regaining privileges through set-uid programs. The log
    files are already open: they stay root's, the job only holds descriptors to them."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(gid or uid, gid or uid, gid or uid)
        os.setresuid(uid, uid, uid)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _fail(errpipe: int, message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(errpipe, message.encode()[:4000])
    os._exit(127)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_python(req: dict[str, Any], errpipe: int) -> None:
    """Become the job: CPython's own start-up steps, minus the interpreter start-up."""
    entry = python_entry(req["argv"])
    assert entry is not None
    os.environ.clear()
    os.environ.update(req["env"])
    tempfile.tempdir = None  # TMPDIR changed: forget the zygote's cached choice
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        with contextlib.suppress(Exception):
            numpy_random.seed()  # a fresh process would not share the zygote's stream
    argv, path0 = sys_argv_for(entry, req["cwd"])
    sys.argv = argv
    sys.path[:0] = [*req.get("sys_path", ()), path0]
    # Line-buffered like an interactive CPython, so streamed logs show progress as it happens.
    enc: dict[str, Any] = {"encoding": "utf-8", "errors": "backslashreplace", "closefd": False}
    sys.stdout = open(1, "w", buffering=1, **enc)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, **enc)  # noqa: SIM115
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    os.close(errpipe)  # set-up done: the zygote may answer "spawned"
    code = 0
    try:
        if entry.kind == "file":
            if not os.path.exists(entry.target):
                print(f"python: can't open file {entry.target!r}", file=sys.stderr)
                code = 2
            else:
                runpy.run_path(entry.target, run_name="__main__")
        elif entry.kind == "module":
            runpy.run_module(entry.target, run_name="__main__", alter_sys=True)
        else:
            # a real __main__ module, as CPython gives `-c` code (pickle, multiprocessing)
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(entry.target, "<string>", "exec"), main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
        code = 1
    run_exitfuncs = getattr(__import__("atexit"), "_run_exitfuncs", None)
    if run_exitfuncs is not None:
        with contextlib.suppress(BaseException):
            run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _child(
    req: dict[str, Any], errpipe: int, cgroups: list[str], streams: tuple[int, int]
) -> None:
    try:
        _child_prepare(bool(req.get("own_proc")), cgroups)
        _become_job(req, errpipe, streams)
    except BaseException as exc:
        _fail(errpipe, f"{type(exc).__name__}: {exc}")
    os._exit(127)


def _spare(own_proc: bool, errpipe: int, cgroups: list[str], channel: socket.socket) -> None:
    """A child forked ahead of its job: prepared, then waiting for one spawn request (a line
    and the job's two stream descriptors) on `channel`; the end of `channel` (the zygote
    discarded it, or died) ends it."""
    try:
        _child_prepare(own_proc, cgroups)
        name = _process_name()
        _name_process(SPARE_NAME)
        # It may wait long: hold nothing of the zygote's meanwhile (its socket to the agent
        # above all, whose end the agent must see when the zygote dies).
        low, high = sorted((errpipe, channel.fileno()))
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, 1 << 16)
        _rehearse()
        line, fds = _receive_request(channel)
        if not line:
            os._exit(0)
        if len(fds) != 2:
            raise OSError("the spawn request came without its two output pipes")
        _name_process(name)  # a forked job looks as it would from a fresh fork
        _become_job(json.loads(line), errpipe, (fds[0], fds[1]))
    except BaseException as exc:
        _fail(errpipe, f"{type(exc).__name__}: {exc}")
    os._exit(127)


#: A spawn request like the agent's, for `_rehearse`.
_REHEARSAL = json.dumps(
    {
        "op": "spawn",
        "id": "0123456789abcdef_0",
        "mode": "fork",
        "argv": ["python", "-c", "pass"],
        "env": {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "FIREPOOL_ATTEMPT": "0123456789abcdef_0"},
        "cwd": "/",
        "sys_path": ["/site"],
        "rlimit_as": None,
        "rlimits": {"NOFILE": 1024},
        "uid": None,
        "gid": None,
        "own_proc": False,
        "spare_ok": True,
    }
)


def _rehearse() -> None:
    """Walk a spare through its job's set-up once, with nothing kept, before it waits.

    A forked child shares the zygote's pages until it writes to them, and in CPython even a
    read writes (a reference count): every page the set-up touches first is copied then, a
    page fault each. From a spare's request to its job's set-up done, that was 162 faults and
    0.74 ms here; rehearsed while it waits, 94 and 0.53 ms (medians of 3 x 20 warm jobs).
    The copies are the ones the job would make anyway, made before its request, not after."""
    req = json.loads(_REHEARSAL)
    entry = python_entry(req["argv"])
    if entry is not None:
        sys_argv_for(entry, req["cwd"])
    dict(os.environ)
    exec(compile("pass", "<string>", "exec"), types.ModuleType("__main__").__dict__)
    with contextlib.suppress(OSError):  # a rehearsal that cannot open /dev/null just ends
        null = os.open(os.devnull, os.O_RDWR)
        try:
            enc: dict[str, Any] = {"encoding": "utf-8", "errors": "backslashreplace"}
            open(null, "w", buffering=1, closefd=False, **enc).close()
            open(null, closefd=False, encoding="utf-8").close()
        finally:
            os.close(null)


def _process_name() -> str:
    with open("/proc/self/comm") as fh:
        return fh.read().rstrip("\n")


def _name_process(name: str) -> None:
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def _receive_request(channel: socket.socket) -> tuple[bytes, list[int]]:
    """One request line and the descriptors sent with its first part ("" at end of stream)."""
    data, fds, _flags, _addr = socket.recv_fds(channel, 1 << 16, 8)
    chunks = [data]
    while data and not data.endswith(b"\n"):
        data = channel.recv(1 << 16)
        chunks.append(data)
    return b"".join(chunks), list(fds)


def _become_job(req: dict[str, Any], errpipe: int, streams: tuple[int, int]) -> None:
    _child_setup(req, errpipe, streams)
    if req["mode"] == "fork":
        _run_python(req, errpipe)
    else:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        os.execvpe(req["argv"][0], req["argv"], req["env"])


@dataclass
class Spare:
    """A child forked and prepared before its request (see `_spare`): the fork, setsid and
    the job's own /proc are off the path to the job's first instruction."""

    pid: int
    reported: int  # the pid the agent knows it by
    own_proc: bool
    channel: socket.socket
    errpipe: int  # read end: closed by the child once its job is set up, or an error

    def close(self) -> None:
        self.channel.close()
        os.close(self.errpipe)


# --------------------------------------------------------------------------- in the zygote


class Zygote:
    def __init__(self, sock: socket.socket, own_proc: bool = False) -> None:
        self.sock = sock
        #: Whether a child can get its own /proc here (asked once, at start).
        self.own_proc = own_proc
        #: pid (as fork returned it) -> (attempt, start time, the pid the agent knows it by)
        self.jobs: dict[int, tuple[str, float, int]] = {}
        #: Init of the pod's PID namespace: pids reported to the agent need translating.
        self.in_namespace = pidns.is_namespace_init()
        self.buffer = b""
        #: Descriptors received and not yet taken by a spawn request, in arrival order.
        self.fds: list[int] = []
        self.child_cgroups: list[str] = []  # cgroups each child must join (join failed)
        #: The child forked for the next spawn (`prefork`), if any.
        self.spare: Spare | None = None

    def join(self, paths: list[str]) -> None:
        """Move the zygote into the pod's cgroups once, so every child is born there.

        Moving a process between cgroups waits for an RCU grace period (the global
        cgroup_threadgroup_rwsem); per job that cost ~10 ms on a busy 2-core VM, on the path to
        the job's first instruction. Born-in-place children cost nothing. The zygote is then
        shielded from the OOM killer (its children reset that), so a job that exceeds the pod's
        limit is the one killed."""
        try:
            for path in paths:
                _write(path, str(os.getpid()))
            with contextlib.suppress(OSError):
                _write("/proc/self/oom_score_adj", "-1000")
            self.send({"ev": "joined", "ok": True, "error": None})
        except OSError as exc:
            self.child_cgroups = list(paths)
            self.send({"ev": "joined", "ok": False, "error": str(exc)})

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def spawn(self, req: dict[str, Any], line: bytes) -> None:
        if len(self.fds) < 2:
            self.send({"ev": "spawn_error", "id": req["id"], "message": "no output pipes came"})
            return
        streams = (self.fds.pop(0), self.fds.pop(0))
        try:
            spare = self._take_spare(req)
            if spare is None or not self._hand(spare, req, line, streams):
                self._fork(req, streams)
        finally:
            for fd in streams:  # the job holds them now, or nobody will
                os.close(fd)

    def prefork(self, req: dict[str, Any]) -> None:
        """Fork and prepare the next spawn's child now, off its path. The agent asks after a
        clean reset (so the spare never shares the pod with a job: one job at a time, and
        the spare becomes the next) and once at start."""
        self.discard()
        own_proc = bool(req.get("own_proc")) and self.own_proc
        ours, theirs = socket.socketpair()
        rfd, wfd = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            ours.close()
            _spare(own_proc, wfd, self.child_cgroups, theirs)
        theirs.close()
        os.close(wfd)
        try:
            reported = pidns.host_pid(pid) if self.in_namespace else pid
        except OSError:
            os.kill(pid, signal.SIGKILL)  # reap() collects it
            ours.close()
            os.close(rfd)
            return
        self.spare = Spare(pid, reported, own_proc, ours, rfd)

    def discard(self) -> None:
        """Let the spare go (closing its channel ends it; the kill makes that certain)."""
        spare, self.spare = self.spare, None
        if spare is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(spare.pid, signal.SIGKILL)
            spare.close()

    def _take_spare(self, req: dict[str, Any]) -> Spare | None:
        """The spare, if it suits the request: prepared with the /proc the job must get, and
        the pod's mounts unchanged since its fork (`spare_ok`: no checkpoint bind mount)."""
        spare = self.spare
        if spare is None:
            return None
        if spare.own_proc != bool(req.get("own_proc")) or not req.get("spare_ok", True):
            self.discard()
            return None
        self.spare = None
        return spare

    def _hand(
        self, spare: Spare, req: dict[str, Any], line: bytes, streams: tuple[int, int]
    ) -> bool:
        """Give the request to the spare; False when it is gone (then a fresh fork serves)."""
        try:
            socket.send_fds(spare.channel, [line], list(streams))
        except OSError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(spare.pid, signal.SIGKILL)
            spare.close()
            return False
        spare.channel.close()
        self._started(req, spare.pid, spare.errpipe, spare.reported)
        return True

    def _fork(self, req: dict[str, Any], streams: tuple[int, int]) -> None:
        rfd, wfd = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            _child(req, wfd, self.child_cgroups, streams)
        os.close(wfd)
        try:
            reported = pidns.host_pid(pid) if self.in_namespace else pid
        except OSError as exc:
            os.kill(pid, signal.SIGKILL)  # the agent could never stop it: do not let it run
            os.close(rfd)
            self.send({"ev": "spawn_error", "id": req["id"], "message": str(exc)})
            return
        self._started(req, pid, rfd, reported)

    def _started(self, req: dict[str, Any], pid: int, errpipe: int, reported: int) -> None:
        """Wait for the child's set-up: its end of `errpipe` closes (exec, or the Python job
        about to run) or carries the error that ended it."""
        chunks = []
        while True:
            chunk = os.read(errpipe, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(errpipe)
        now = time.monotonic()
        if chunks:
            self.send({"ev": "spawn_error", "id": req["id"], "message": b"".join(chunks).decode()})
            # the child exits 127 by itself; reap() collects it as an unknown pid
            return
        self.jobs[pid] = (req["id"], now, reported)
        self.send({"ev": "spawned", "id": req["id"], "pid": reported, "t": now})

    def reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.spare is not None and pid == self.spare.pid:
                self.discard()  # it died before its request came: the next spawn forks
                continue
            job = self.jobs.pop(pid, None)
            if job is not None:
                self.send(
                    {
                        "ev": "exit",
                        "id": job[0],
                        "pid": job[2],
                        "status": status,
                        "maxrss_kib": int(usage.ru_maxrss),
                        "t": time.monotonic(),
                        "t0": job[1],
                    }
                )

    def handle_input(self) -> bool:
        data, ancdata, _flags, _addr = self.sock.recvmsg(
            1 << 16, _FDS_SPACE, socket.MSG_CMSG_CLOEXEC
        )
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % _FD_SIZE
                self.fds.extend(array.array("i", payload[:usable]))
        if not data:
            return False
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            req = json.loads(line)
            op = req.get("op")
            if op == "spawn":
                self.spawn(req, line + b"\n")
            elif op == "prefork":
                self.prefork(req)
            elif op == "discard":
                self.discard()
            elif op == "join":
                self.join(list(req.get("cgroup_procs", ())))
        return True

    def serve(self) -> None:
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ, "sock")
        sel.register(rfd, selectors.EVENT_READ, "sig")
        self.reap()
        while True:
            for key, _ in sel.select():
                if key.data == "sig":
                    with contextlib.suppress(BlockingIOError):
                        os.read(rfd, 4096)
                    self.reap()
                elif not self.handle_input():
                    return  # the agent is gone: so is the pod


def main(argv: list[str]) -> int:
    fd = int(argv[0])
    modules = [m for m in argv[1].split(",") if m] if len(argv) > 1 else []
    global RESOLV_CONF
    RESOLV_CONF = argv[2] if len(argv) > 2 else None
    sock = socket.socket(fileno=fd)
    os.chdir("/")  # never pin the pod directory's mount: the agent replaces mounts under it
    set_subreaper()
    # Tried before the preload, while a fork is still cheap.
    own_proc = pidns.is_namespace_init() and pidns.can_give_own_proc()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    loaded, failed = preload(modules)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    zygote = Zygote(sock, own_proc)
    zygote.send(
        {
            "ev": "ready",
            "pid": os.getpid(),
            "modules": loaded,
            "failed": failed,
            "own_proc": own_proc,
        }
    )
    zygote.serve()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

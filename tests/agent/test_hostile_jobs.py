"""Hostile jobs against real local pods: after each reset the next job finds nothing, and no job
reaches anything outside its own pod.

The whole module runs once per isolation mode the local backend can choose on this machine
(`private`, and the explicit `weak`). A mode the host cannot provide is skipped, or fails the
run under CI=true. One pod per mode serves the module (a second one is the "other caller"
where a test needs one); every test resets it and checks the reset was clean, so a leak from
one test would also fail the next. Threat model: docs/pod-agent.md.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pod_helpers import (
    EventSink,
    Loop,
    backend_at,
    json_job,
    make_pod,
    pods_processes,
    py,
    read_log,
    run_job,
    wait_exit,
)

from firepool.agent import cgroups, procfs
from firepool.backends.agent_client import AgentClient
from firepool.backends.base import PodRecord
from firepool.backends.local import LocalBackend
from firepool.model import ConfigError, ConflictError
from firepool.protocol import Health, IsolationMode, LaunchRequest, StopReason
from firepool.testing.control import cpu_pool

pytestmark = pytest.mark.timeout(120)

#: pickle is preloaded because weak mode cannot bind an interpreter that lives under a
#: directory the job's uid may not pass through (/root here) back into reach.
POOL = cpu_pool(memory_mib_per_pod=512, preload_modules=("json", "pickle"))
#: A secret in the broker's own environment: no job may see it.
BROKER_SECRET = ("FIREPOOL_TEST_BROKER_CREDENTIAL", "cloud-key-" + uuid.uuid4().hex)
PIDS_MAX = 200


class Env:
    def __init__(self, backend: LocalBackend, loop: Loop, sink: EventSink, root: Path) -> None:
        self.backend, self.loop, self.sink, self.root = backend, loop, sink, root
        self.record, self.client = loop.run(make_pod(backend, POOL, callback_url=sink.url))
        self.health: Health = loop.run(self.client.health())
        self.n = 0
        self._other: tuple[PodRecord, AgentClient] | None = None

    @property
    def mode(self) -> IsolationMode:
        return self.health.isolation

    @property
    def uid(self) -> int:
        assert self.health.job_uid is not None
        return self.health.job_uid

    @property
    def other(self) -> tuple[PodRecord, AgentClient]:
        """A second pod (another caller's, as far as isolation goes)."""
        if self._other is None:
            self._other = self.loop.run(make_pod(self.backend, POOL))
        return self._other

    def attempt(self) -> str:
        self.n += 1
        return f"job-{self.n}:0"

    def reset_clean(self, client: AgentClient | None = None) -> None:
        result = self.loop.run((client or self.client).reset())
        assert result.clean, result.reason


def _modes() -> list[str]:
    return [m.value for m in IsolationMode]


@pytest.fixture(scope="module", params=_modes())
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    mode = request.param
    sink = EventSink()
    os.environ[BROKER_SECRET[0]] = BROKER_SECRET[1]
    try:
        with backend_at(f"hostile-{mode}", isolation=mode, pids_max=PIDS_MAX) as (b, loop, root):
            yield Env(b, loop, sink, root)
    except ConfigError as exc:
        # The backend refuses a mode this host cannot give; CI machines can give every mode.
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and this host cannot provide isolation {mode}: {exc}")
        pytest.skip(f"this host cannot provide isolation {mode}: {exc}")
    finally:
        os.environ.pop(BROKER_SECRET[0], None)
        sink.close()


def test_the_pod_runs_in_the_mode_it_records_and_never_as_root(env: Env) -> None:
    assert env.mode.value == env.record.isolation == env.backend.isolation.value
    recorded = env.loop.run(env.backend.get(env.record.name))
    assert recorded is not None and recorded.isolation == env.mode.value
    assert recorded.pid_namespace is (env.health.limits["pid"] == "namespace")
    seen = env.loop.run(
        json_job(env.client, env.attempt(), "import os, json; print(json.dumps(os.getresuid()))")
    )
    assert seen == [env.uid] * 3 and env.uid >= 1000
    env.reset_clean()
    _, out = env.loop.run(run_job(env.client, env.attempt(), ["id", "-u"]))
    assert out.strip() == str(env.uid)
    if env.mode is IsolationMode.PRIVATE:
        assert env.health.confined and env.health.limits["ipc"] == "namespace"
        assert env.health.limits["proc"] == "hidepid"
        assert env.health.limits["pid"] == "namespace"
    assert env.health.limits["mqueue"] == "swept"
    assert env.health.limits["pids"].endswith(str(PIDS_MAX))
    for controller in _v2_only(("pids", "memory")):  # the fork bomb and the hog below meet v2
        assert env.health.limits[controller].startswith("cgroup2:"), env.health.limits
    env.reset_clean()


def _v2_only(controllers: tuple[str, ...]) -> list[str]:
    """Those of `controllers` that this kernel offers in its unified hierarchy alone."""
    mounts = cgroups._mounts()
    v1 = {c for _, t, o in mounts if t == "cgroup" for c in o.split(",")}
    v2 = next((Path(m) for m, t, _ in mounts if t == "cgroup2"), None)
    offered = cgroups._words(v2 / "cgroup.controllers") if v2 is not None else set()
    return [c for c in controllers if c in offered and c not in v1]


def test_exit_is_pushed_with_code_and_runtime(env: Env) -> None:
    attempt = env.attempt()
    resp = env.loop.run(
        env.client.launch(LaunchRequest(attempt=attempt, argv=py("raise SystemExit(3)")))
    )
    assert resp.mode.value == "fork"
    pushed = env.sink.wait_for(attempt)
    assert pushed.exit_code == 3 and pushed.signal is None and not pushed.oom
    assert pushed.runtime_s >= 0 and pushed.pod == env.record.name
    assert env.sink.auth[-1] == f"Bearer {env.record.secret}"
    env.reset_clean()


def test_exec_path_and_signal_exit(env: Env) -> None:
    attempt = env.attempt()
    event, out = env.loop.run(
        run_job(env.client, attempt, ["sh", "-c", "echo exec-ok; kill -9 $$"])
    )
    assert out.strip() == "exec-ok"
    assert event.exit_code is None and event.signal == signal.SIGKILL
    env.reset_clean()


def test_attempt_ids_only_move_forward(env: Env) -> None:
    loop, client = env.loop, env.client
    first = loop.run(client.launch(LaunchRequest(attempt="fwd:1", argv=py("pass"))))
    again = loop.run(client.launch(LaunchRequest(attempt="fwd:1", argv=py("pass"))))
    assert again.duplicate and again.pid == first.pid
    loop.run(wait_exit(client, "fwd:1"))
    with pytest.raises(ConflictError):  # dirty: not reset yet
        loop.run(client.launch(LaunchRequest(attempt="other:0", argv=py("pass"))))
    env.reset_clean()
    for stale in ("fwd:0", "fwd:1"):
        with pytest.raises(ConflictError):
            loop.run(client.launch(LaunchRequest(attempt=stale, argv=py("pass"))))
    loop.run(run_job(client, "fwd:2", py("pass")))
    env.reset_clean()


DAEMONIZE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        time.sleep(1000)
        os._exit(0)
    print(pid, os.readlink("/proc/self/ns/pid"), flush=True)
    os._exit(0)
time.sleep(0.1)
"""


def test_setsid_double_forked_grandchild_is_killed(env: Env) -> None:
    event, out = env.loop.run(run_job(env.client, env.attempt(), py(DAEMONIZE)))
    assert event.exit_code == 0
    seen_by_job, pid_ns = int(out.split()[0]), out.split()[1]
    grandchild = procfs.known_here_as(pid_ns, seen_by_job)
    assert grandchild is not None
    proc = procfs.read_proc(grandchild)
    assert proc is not None and not proc.dead, "the daemon should outlive its job until reset"
    assert proc.sid == grandchild or proc.sid != env.record.pid  # it left the job's session
    result = env.loop.run(env.client.reset())
    assert result.clean, result.reason
    assert result.killed >= 1
    assert not procfs.alive(grandchild)
    check = f"""
    import os, json
    try:
        os.kill({seen_by_job}, 0)
        print(json.dumps("alive"))
    except ProcessLookupError:
        print(json.dumps("gone"))
    """
    assert env.loop.run(json_job(env.client, env.attempt(), check)) == "gone"
    env.reset_clean()


def test_sigterm_ignorer_is_killed_after_grace(env: Env) -> None:
    attempt = env.attempt()
    code = """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(1000)
    """
    env.loop.run(env.client.launch(LaunchRequest(attempt=attempt, argv=py(code))))
    time.sleep(0.2)
    t0 = time.monotonic()
    status = env.loop.run(env.client.stop(attempt, grace_s=0.3))
    assert 0.25 < time.monotonic() - t0 < 5
    assert status.exit is not None and status.exit.signal == signal.SIGKILL
    assert status.exit.stop_reason is StopReason.STOP
    env.reset_clean()


def test_timeout_stops_the_attempt(env: Env) -> None:
    attempt = env.attempt()
    env.loop.run(
        env.client.launch(
            LaunchRequest(attempt=attempt, argv=py("import time; time.sleep(100)"), timeout_s=0.3)
        )
    )
    event = env.sink.wait_for(attempt, timeout=10)
    assert event.stop_reason is StopReason.TIMEOUT and event.signal == signal.SIGTERM
    env.reset_clean()


TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")

LEAVE_FILES = """
import os, json, tempfile, sys
token = sys.argv[1]
made = []
for d in ("/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir(), ".", os.path.expanduser("~")):
    for name in (token, "." + token):
        path = os.path.join(d, name)
        with open(path, "w") as fh:
            fh.write("secret of the last caller")
        made.append(path)
os.mkdir(os.path.join("/tmp", token + ".d"))
os.chmod(os.path.join("/tmp", token + ".d"), 0o000)  # a directory reset must still remove
held = open(os.path.join("/dev/shm", token + ".held"), "w")  # unlinked while open
os.unlink(held.name)
os.mkfifo(os.path.join("/tmp", token + ".fifo"))
print(json.dumps(made))
"""

LOOK = """
import os, json, tempfile
def ls(p):
    try:
        return sorted(os.listdir(p))
    except OSError:
        return []
print(json.dumps({d: ls(d) for d in ("/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir(), ".",
                                      os.path.expanduser("~"))}))
"""


def test_temp_files_and_workspace_do_not_cross_a_reset(env: Env) -> None:
    token = "leak-" + uuid.uuid4().hex[:8]
    argv = ["python", "-c", LEAVE_FILES, token]
    event, out = env.loop.run(run_job(env.client, env.attempt(), argv))
    assert event.exit_code == 0, env.loop.run(read_log(env.client, f"job-{env.n}:0", "stderr"))
    made = json.loads(out)
    env.reset_clean()
    seen = env.loop.run(json_job(env.client, env.attempt(), LOOK))
    leaked = {d: [n for n in names if token in n] for d, names in seen.items()}
    assert not any(leaked.values()), leaked
    home = os.path.join(str(env.root), env.record.name, "work")
    assert seen["."] == [] and seen[home] == []
    # Nothing reached the host either (weak mode: it did, and reset took it back).
    on_host = [p for p in made if os.path.isabs(p) and os.path.exists(p)]
    on_host += [d for d in TEMP_DIRS for n in os.listdir(d) if token in n]
    assert on_host == []
    env.reset_clean()


def test_environment_does_not_cross_and_holds_no_broker_secret(env: Env) -> None:
    first = env.attempt()
    env.loop.run(
        run_job(env.client, first, py("pass"), env={"CALLER_TOKEN": "previous-caller-secret"})
    )
    env.reset_clean()
    code = f"""
    import os, json
    found = {{"env": sorted(os.environ)}}
    for pid in ("self", str(os.getppid()), {env.health.pid!r}):
        try:
            with open(f"/proc/{{pid}}/environ", "rb") as fh:
                found[pid] = fh.read().decode(errors="replace")
        except OSError as exc:
            found[pid] = type(exc).__name__
    print(json.dumps(found))
    """
    seen = env.loop.run(json_job(env.client, env.attempt(), code))
    text = json.dumps(seen)
    assert "CALLER_TOKEN" not in seen["env"] and "previous-caller-secret" not in text
    assert BROKER_SECRET[1] not in text and BROKER_SECRET[0] not in text
    assert seen[str(env.health.pid)] in ("PermissionError", "FileNotFoundError")
    env.reset_clean()


DAEMONS = """
import os, signal, subprocess, sys, time
subprocess.Popen(["nohup", "sleep", "1000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
subprocess.Popen(["setsid", "sleep", "1000"])
subprocess.Popen(["env", "-i", "/bin/sleep", "1001"])  # no environment: no marker, no paths
if os.fork() == 0:  # double fork, new session, ignores SIGTERM and SIGHUP
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        time.sleep(1000)
    os._exit(0)
time.sleep(0.3)
"""


def test_daemons_of_every_kind_are_gone_after_reset(env: Env) -> None:
    event, _ = env.loop.run(run_job(env.client, env.attempt(), py(DAEMONS)))
    assert event.exit_code == 0
    agents = {env.health.pid, *procfs.descendants(procfs.snapshot(), [env.record.pid])}
    alive = [p for p in pods_processes(env.root, {env.uid}) if procfs.real_uid(p) == env.uid]
    assert agents & set(alive) == set(alive) and len(alive) >= 4, (
        "the daemons should outlive their job until reset"
    )
    result = env.loop.run(env.client.reset())
    assert result.clean, result.reason
    assert result.killed >= 4
    # A private pod's PID namespace and cgroup confine its jobs: reset lists them from the
    # cgroup (then one /proc snapshot confirms); a weak pod's are found in the host's /proc.
    confined = (
        env.mode is IsolationMode.PRIVATE
        and env.health.limits["pid"].startswith("namespace")
        and any(t.startswith("cgroup") for t in env.health.process_tracking)
    )
    assert ("kill_cgroup" in result.steps_ms) is confined, result.steps_ms
    left = [p for p in pods_processes(env.root, {env.uid}) if p in alive]
    assert left == [], [
        (procfs.read_proc(p), Path(f"/proc/{p}/cmdline").read_bytes()) for p in left
    ]


IPC_AND_SOCKETS = """
import ctypes, os, socket, subprocess, sys, json, time
token = sys.argv[1]
for flag in ("-M", "-S", "-Q"):
    subprocess.run(["ipcmk", flag, "64" if flag == "-M" else "1"], check=True,
                   stdout=subprocess.DEVNULL)
libc = ctypes.CDLL(None, use_errno=True)
queue = libc.mq_open(("/" + token).encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
assert queue >= 0, os.strerror(ctypes.get_errno())
libc.mq_send(queue, b"last caller's message", 21, 0)
shm = libc.shm_open(("/" + token).encode(), os.O_CREAT | os.O_RDWR, 0o600)
assert shm >= 0 and libc.ftruncate(shm, 1 << 20) == 0, os.strerror(ctypes.get_errno())
if os.fork() == 0:
    os.setsid()
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(os.path.join("/tmp", token + ".sock"))
    unix.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\\0" + token)
    abstract.listen()
    time.sleep(1000)
time.sleep(0.2)
print(json.dumps(len(open("/proc/sysvipc/shm").readlines()) - 1))
"""

IPC_LOOK = """
import ctypes, json, os, socket, sys
token = sys.argv[1]
found = {}
libc = ctypes.CDLL(None, use_errno=True)
queue = libc.mq_open(("/" + token).encode(), os.O_RDONLY)
found["mqueue"] = "opened" if queue >= 0 else os.strerror(ctypes.get_errno())
shm = libc.shm_open(("/" + token).encode(), os.O_RDONLY, 0)
found["posix_shm"] = "opened" if shm >= 0 else os.strerror(ctypes.get_errno())
for kind in ("shm", "sem", "msg"):
    with open(f"/proc/sysvipc/{kind}") as fh:
        header = fh.readline().split()
        found[kind] = [dict(zip(header, map(int, line.split()))) for line in fh]
for name, addr in (("unix", os.path.join("/tmp", token + ".sock")), ("abstract", "\\0" + token)):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(addr)
        found[name] = "connected"
    except OSError as exc:
        found[name] = type(exc).__name__
print(json.dumps(found))
"""


def _host_ipc(uid: int) -> list[str]:
    """The uid's IPC objects in the host's IPC namespace: SysV and POSIX message queues."""
    from firepool.agent import isolation

    queues = isolation.open_mqueues()
    assert queues is not None, "this kernel gives no mqueue filesystem"
    try:
        names = isolation.mqueues(queues, uid)
    finally:
        os.close(queues)
    return [f"{k}:{i}" for k, i in isolation.sysv_objects(uid)] + [f"mq:{n}" for n in names]


def test_ipc_objects_and_sockets_do_not_survive(env: Env) -> None:
    token = "ipc-" + uuid.uuid4().hex[:8]
    event, out = env.loop.run(
        run_job(env.client, env.attempt(), ["python", "-c", IPC_AND_SOCKETS, token])
    )
    assert event.exit_code == 0, env.loop.run(read_log(env.client, f"job-{env.n}:0", "stderr"))
    assert json.loads(out) >= 1
    if env.mode is IsolationMode.PRIVATE:
        assert _host_ipc(env.uid) == []  # the pod's own IPC namespace: never on the host
    else:
        assert len(_host_ipc(env.uid)) == 4 and f"mq:{token}" in _host_ipc(env.uid)
        assert os.path.exists(f"/dev/shm/{token}")
    env.reset_clean()
    assert _host_ipc(env.uid) == [] and not os.path.exists(f"/dev/shm/{token}")
    code = ["python", "-c", IPC_LOOK, token]
    _, out = env.loop.run(run_job(env.client, env.attempt(), code))
    seen = json.loads(out)
    private = env.mode is IsolationMode.PRIVATE  # then every object in sight is the pod's
    mine = {
        k: [r for r in seen[k] if private or env.uid in (r["uid"], r["cuid"])]
        for k in ("shm", "sem", "msg")
    }
    assert mine == {"shm": [], "sem": [], "msg": []}
    assert seen["mqueue"] == os.strerror(errno.ENOENT)
    assert seen["posix_shm"] == os.strerror(errno.ENOENT)
    assert seen["unix"] in ("FileNotFoundError", "ConnectionRefusedError")
    assert seen["abstract"] == "ConnectionRefusedError"
    env.reset_clean()


def test_jobs_cannot_read_another_pod_the_backend_state_or_the_agent_secret(env: Env) -> None:
    other, other_client = env.other
    env.loop.run(
        run_job(other_client, "other-1:0", ["sh", "-c", "echo other-secret > mine; echo other-log"])
    )
    secrets = [env.record.secret, other.secret]
    code = f"""
    import os, json
    root = {str(env.root)!r}
    seen, errors = [], {{}}
    def note(exc):
        errors[exc.filename] = type(exc).__name__
    for dirpath, dirnames, filenames in os.walk(root, onerror=note):
        for name in filenames:
            try:
                with open(os.path.join(dirpath, name), "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            if any(s in data for s in ({secrets[0].encode()!r}, {secrets[1].encode()!r},
                                       b"other-secret", b"other-log")):
                seen.append(os.path.join(dirpath, name))
    probes = {{}}
    for path in (os.path.join(root, ".state", {env.record.name!r} + ".agent.json"),
                 os.path.join(root, {other.name!r}, "work", "mine"),
                 os.path.join(root, {other.name!r}, "logs"),
                 f"/proc/{env.health.pid}/environ", f"/proc/{env.health.pid}/mem",
                 f"/proc/{env.health.pid}/cmdline"):
        try:
            with open(path, "rb") as fh:
                probes[path] = "read" if fh.read(1) is not None else "read"
        except OSError as exc:
            probes[path] = type(exc).__name__
    print(json.dumps({{"seen": seen, "probes": probes}}))
    """
    found = env.loop.run(json_job(env.client, env.attempt(), code))
    assert found["seen"] == []
    readable = [p for p, how in found["probes"].items() if how == "read"]
    if env.mode is IsolationMode.WEAK:  # no hidepid: command lines are public (no secret there)
        readable.remove(f"/proc/{env.health.pid}/cmdline")
    assert readable == [], found["probes"]
    env.reset_clean()
    env.reset_clean(other_client)


WRITE_OUT = """
import os, json, sys
token = sys.argv[1]
results = {}
for d in sys.argv[2:]:
    path = os.path.join(d, token)
    try:
        with open(path, "w") as fh:
            fh.write("x")
        results[d] = "wrote"
    except OSError as exc:
        results[d] = type(exc).__name__
print(json.dumps(results))
"""


def test_jobs_cannot_write_outside_their_pod(env: Env) -> None:
    token = "out-" + uuid.uuid4().hex[:8]
    other, _ = env.other
    targets = ["/", "/opt", "/etc", "/usr/local", "/var", "/root", str(env.root),
               str(env.root / ".state"), str(env.root / env.record.name),
               str(env.root / env.record.name / "logs"), str(env.root / other.name),
               "/run/lock", str(Path(__file__).resolve().parent)]  # fmt: skip
    _, out = env.loop.run(
        run_job(env.client, env.attempt(), ["python", "-c", WRITE_OUT, token, *targets])
    )
    results = json.loads(out)
    wrote = [d for d, how in results.items() if how == "wrote"]
    # Only the host's shared scratch places are writable, in weak mode only, and reset takes
    # back what was written there.
    assert set(wrote) <= (set() if env.mode is IsolationMode.PRIVATE else {"/run/lock"})
    env.reset_clean()
    assert [t for t in targets if os.path.exists(os.path.join(t, token))] == []


def test_jobs_cannot_signal_outside_their_pod(env: Env) -> None:
    other, other_client = env.other
    victim = env.loop.run(
        other_client.launch(LaunchRequest(attempt="victim-1:0", argv=["sleep", "1000"]))
    )
    targets = [victim.pid, env.health.pid, other.pid, os.getpid(), 1]
    code = f"""
    import os, signal, json
    out = {{}}
    for pid in {targets!r}:
        try:
            os.kill(pid, signal.SIGKILL)
            out[pid] = "killed"
        except OSError as exc:
            out[pid] = type(exc).__name__
    print(json.dumps(out), flush=True)
    try:
        os.kill(-1, signal.SIGKILL)  # everything this uid may signal: its own pod, itself included
    except OSError:
        pass
    """
    _, out = env.loop.run(run_job(env.client, env.attempt(), py(code)))
    seen = json.loads(out)
    assert len(seen) == len(targets) and "killed" not in seen.values(), seen
    assert procfs.alive(victim.pid) and procfs.alive(env.health.pid) and procfs.alive(other.pid)
    env.loop.run(other_client.stop("victim-1:0", grace_s=0.1))
    env.reset_clean(other_client)
    env.reset_clean()


PID_LOOK = """
import json, os, sys
listed = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())
owners = {}
for pid in listed:
    try:
        with open(f"/proc/{pid}/status") as fh:
            owners[pid] = int(next(l for l in fh if l.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        pass  # exited meanwhile
probes = {}
for pid in map(int, sys.argv[1:]):
    if owners.get(pid) == os.getuid():
        probes[pid] = "own"  # the number names one of our own processes in here
        continue
    try:
        os.kill(pid, 0)
        probes[pid] = "reachable"
    except OSError as exc:
        probes[pid] = type(exc).__name__
print(json.dumps({"me": os.getpid(), "self": os.readlink("/proc/self"), "owners": owners,
                  "ns": os.readlink("/proc/self/ns/pid"), "probes": probes}))
"""


def test_pid_namespace_is_what_the_pod_claims(env: Env) -> None:
    """`limits["pid"] == "namespace"`: the job cannot name a process outside its pod (kill(2)
    says ESRCH, not EPERM), and its /proc is its namespace's, listing only its own processes.
    `shared`: the job is in the host's namespace, and only uids keep it from signalling."""
    other, other_client = env.other
    victim = env.loop.run(
        other_client.launch(LaunchRequest(attempt="pidns-victim:0", argv=["sleep", "1000"]))
    )
    targets = [env.health.pid, env.record.pid, other.pid, victim.pid, os.getpid()]
    argv = ["python", "-c", PID_LOOK, *map(str, targets)]
    launched = env.loop.run(env.client.launch(LaunchRequest(attempt=env.attempt(), argv=argv)))
    env.loop.run(wait_exit(env.client, launched.attempt))
    seen = json.loads(env.loop.run(read_log(env.client, launched.attempt)))
    probes = {int(k): v for k, v in seen["probes"].items()}
    assert seen["self"] == str(seen["me"])  # /proc speaks the job's own pids
    host_ns = os.readlink(f"/proc/{env.health.pid}/ns/pid")
    if env.health.limits["pid"] == "namespace":
        assert seen["ns"] != host_ns
        assert set(seen["owners"].values()) == {env.uid}  # only its own processes in sight
        assert seen["me"] != launched.pid  # the host knows the job by another pid
        assert set(probes.values()) <= {"ProcessLookupError", "own"}, probes
        assert list(probes.values()).count("ProcessLookupError") >= len(targets) - 1, probes
    else:
        assert env.health.limits["pid"] == "shared" and env.mode is IsolationMode.WEAK
        assert seen["ns"] == host_ns and seen["me"] == launched.pid
        assert set(probes.values()) == {"PermissionError"}, probes
    assert procfs.alive(victim.pid)
    env.loop.run(other_client.stop("pidns-victim:0", grace_s=0.1))
    env.reset_clean(other_client)
    env.reset_clean()


FORK_BOMB = """
import os, time
children = 0
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    try:
        if os.fork() == 0:
            time.sleep(1000)
            os._exit(0)
        children += 1
    except OSError:
        break
print(children, flush=True)
time.sleep(0.5)
"""


def test_fork_bomb_is_capped_and_hurts_only_its_own_pod(env: Env) -> None:
    _, other_client = env.other
    _, out = env.loop.run(run_job(env.client, env.attempt(), py(FORK_BOMB)), timeout=60)
    assert int(out.split()[0]) < PIDS_MAX, "the pids limit should stop the bomb"
    # the other pod still starts jobs
    _, out = env.loop.run(run_job(other_client, "alive-1:0", ["echo", "alive"]))
    assert out.strip() == "alive"
    result = env.loop.run(env.client.reset())
    assert result.clean, result.reason
    assert result.killed >= 10
    env.reset_clean(other_client)


def test_memory_hog_is_killed_alone(env: Env) -> None:
    _, other_client = env.other
    sleeper = env.loop.run(
        other_client.launch(LaunchRequest(attempt="calm-1:0", argv=["sleep", "1000"]))
    )
    code = "b = bytearray(900 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])"
    event, _ = env.loop.run(run_job(env.client, env.attempt(), py(code)))
    assert event.oom
    assert procfs.alive(sleeper.pid) and env.loop.run(env.client.health()).ok
    env.loop.run(other_client.stop("calm-1:0", grace_s=0.1))
    env.reset_clean(other_client)
    env.reset_clean()


def test_ten_thousand_files_are_removed(env: Env) -> None:
    code = """
    import os
    os.makedirs("scratch", exist_ok=True)
    for i in range(10000):
        with open(f"scratch/f{i}", "w") as fh:
            fh.write("x")
    """
    event, _ = env.loop.run(run_job(env.client, env.attempt(), py(code)))
    assert event.exit_code == 0
    result = env.loop.run(env.client.reset())
    assert result.clean, result.reason
    if not env.backend.capabilities.private_scratch:  # counted only when unlinked one by one
        assert result.files_removed >= 10000
    seen = env.loop.run(json_job(env.client, env.attempt(), LOOK))
    assert seen["."] == []
    env.reset_clean()


def test_warm_interpreter_has_preloaded_modules(env: Env) -> None:
    health = env.loop.run(env.client.health())
    assert "json" in health.warm_modules
    code = """
    import sys, json, pickle
    class Point:  # defined in __main__: pickling needs a real __main__ module
        pass
    pickle.loads(pickle.dumps(Point()))
    print(json.dumps({'json': 'json' in sys.modules, 'argv': sys.argv}))
    """
    seen = env.loop.run(json_job(env.client, env.attempt(), code))
    assert seen["json"] is True and seen["argv"] == ["-c"]
    env.reset_clean()


def test_logs_follow_until_exit(env: Env) -> None:
    attempt = env.attempt()
    code = """
    import time
    for i in range(3):
        print(i, flush=True)
        time.sleep(0.05)
    """
    env.loop.run(env.client.launch(LaunchRequest(attempt=attempt, argv=py(code))))

    async def follow() -> bytes:
        return b"".join([c async for c in env.client.logs(attempt, follow=True)])

    assert env.loop.run(follow()).split() == [b"0", b"1", b"2"]
    env.reset_clean()


def test_wrong_secret_is_refused(env: Env) -> None:
    from firepool.model import UnauthorizedError

    async def probe() -> None:
        async with AgentClient(env.record.agent_url, "x" * 20) as bad:
            await bad.health()

    with pytest.raises(UnauthorizedError):
        env.loop.run(probe())


def _escape(record: PodRecord, marker_line: str) -> subprocess.Popen[bytes]:
    """A process the agent does not own, in another session, carrying the pod's marker."""
    name, _, value = marker_line.partition("=")
    proc = subprocess.Popen(
        ["sleep", "1000"], env={**os.environ, name: value}, start_new_session=True
    )
    # Stop it only once it runs `sleep` with its own environment: stopped between fork and
    # exec, /proc would still show this test's environment, without the marker.
    needle = f"{name}={value}".encode()
    deadline = time.monotonic() + 5
    while needle not in Path(f"/proc/{proc.pid}/environ").read_bytes():
        assert time.monotonic() < deadline, "the stray process never exec'd"
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGSTOP)
    return proc


def test_unconfirmable_process_makes_reset_unclean_and_pod_is_replaced(env: Env) -> None:
    sink, loop = env.sink, env.loop
    record, client = loop.run(make_pod(env.backend, POOL, callback_url=sink.url))
    code = "import os; print('FIREPOOL_POD_MARKER=' + os.environ['FIREPOOL_POD_MARKER'])"
    _, out = loop.run(run_job(client, "esc:0", py(code)))
    stray = _escape(record, out.strip())
    try:
        result = loop.run(client.reset())
        assert not result.clean and "marker" in (result.reason or "")
        with pytest.raises(ConflictError):
            loop.run(client.launch(LaunchRequest(attempt="esc:1", argv=py("pass"))))
        loop.run(env.backend.delete(record.name))
        assert stray.wait(5) == -signal.SIGKILL  # delete swept it by the pod's marker
        assert not os.path.exists(env.backend.root / record.name)
        # the next job runs on a new pod
        fresh, fresh_client = loop.run(make_pod(env.backend, POOL))
        event, _ = loop.run(run_job(fresh_client, "esc:1", py("print('ok')")))
        assert event.exit_code == 0
        assert loop.run(fresh_client.reset()).clean
        loop.run(env.backend.delete(fresh.name))
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait()

"""Hostile jobs against real local pods: after each reset the next job finds nothing.

One pod (private namespace when the host permits) serves the whole module; every test resets it
and checks the reset was clean, so a leak from one test would also fail the next.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pod_helpers import (
    EventSink,
    Loop,
    backend_at,
    json_job,
    make_pod,
    py,
    run_job,
    wait_exit,
)

from firepool.agent import procfs
from firepool.backends.agent_client import AgentClient
from firepool.backends.base import PodRecord
from firepool.backends.local import LocalBackend
from firepool.model import ConflictError, PoolSpec
from firepool.protocol import IsolationMode, LaunchRequest, StopReason

pytestmark = pytest.mark.timeout(120)

POOL = PoolSpec(name="cpu", memory_mib_per_pod=512, preload_modules=("json",))


class Env:
    def __init__(self, backend: LocalBackend, loop: Loop, sink: EventSink) -> None:
        self.backend, self.loop, self.sink = backend, loop, sink
        self.record, self.client = loop.run(make_pod(backend, POOL, callback_url=sink.url))
        self.n = 0

    def attempt(self) -> str:
        self.n += 1
        return f"job-{self.n}:0"

    def reset_clean(self) -> None:
        result = self.loop.run(self.client.reset())
        assert result.clean, result.reason


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    sink = EventSink()
    with backend_at("hostile") as (backend, loop, _root):
        yield Env(backend, loop, sink)
    sink.close()


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
    print(pid, flush=True)
    os._exit(0)
time.sleep(0.1)
"""


def test_setsid_double_forked_grandchild_is_killed(env: Env) -> None:
    event, out = env.loop.run(run_job(env.client, env.attempt(), py(DAEMONIZE)))
    assert event.exit_code == 0
    grandchild = int(out.split()[0])
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
        os.kill({grandchild}, 0)
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


SECRETS = """
import os, json, tempfile
for path in ("/dev/shm/secret", "/tmp/secret", os.path.join(tempfile.gettempdir(), "secret2"),
             "secret", os.path.expanduser("~/.secret")):
    with open(path, "w") as fh:
        fh.write("token")
print(json.dumps(tempfile.gettempdir()))
"""

LOOK = """
import os, json, tempfile
def ls(p):
    try:
        return sorted(os.listdir(p))
    except FileNotFoundError:
        return []
print(json.dumps({"shm": ls("/dev/shm"), "tmp": ls("/tmp"), "tmpdir": ls(tempfile.gettempdir()),
                  "cwd": ls("."), "home": ls(os.path.expanduser("~"))}))
"""


def test_secrets_in_shm_tmp_and_workspace_do_not_cross(env: Env) -> None:
    health = env.loop.run(env.client.health())
    env.loop.run(json_job(env.client, env.attempt(), SECRETS))
    env.reset_clean()
    seen = env.loop.run(json_job(env.client, env.attempt(), LOOK))
    assert seen["cwd"] == [] and seen["home"] == [] and seen["tmpdir"] == []
    if health.isolation is IsolationMode.PRIVATE:
        assert seen["shm"] == [] and seen["tmp"] == []
    else:  # weak mode: shared /dev/shm and /tmp are explicitly out of scope; clean up
        for path in ("/dev/shm/secret", "/tmp/secret"):
            if os.path.exists(path):
                os.unlink(path)
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
    assert seen["cwd"] == []
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


def test_memory_limit_kill_is_reported_as_oom(env: Env) -> None:
    health = env.loop.run(env.client.health())
    code = "b = bytearray(900 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])"
    event, _ = env.loop.run(run_job(env.client, env.attempt(), py(code)))
    assert event.oom, (health.memory_limit, event)
    env.reset_clean()


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

"""The warm interpreter forks the next job's child ahead of it, once the pod is clean (a
"spare": its fork, `setsid` and own /proc are done before the launch comes). A real agent in a
real local pod, in every isolation mode the host gives.

What must hold: a launch runs in the spare; no spare exists while a job runs (so no job can
reach the child the next caller's job will become); a spare that died, or that predates a
mount the launch made, is never used; a reset with no launch between lets the old spare go.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pod_helpers import Loop, backend_at, json_job, make_pod, new_root, py, run_job, wait_exit

from firepool.agent import procfs
from firepool.agent.zygote import SPARE_NAME
from firepool.backends.agent_client import AgentClient
from firepool.backends.local import LocalBackend
from firepool.model import ConfigError
from firepool.protocol import IsolationMode, LaunchRequest
from firepool.testing.control import cpu_pool
from firepool.testing.host import needs
from firepool.testing.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

POOL = cpu_pool(memory_mib_per_pod=256)


class SparePod:
    def __init__(self, client: AgentClient, loop: Loop) -> None:
        self.client, self.loop = client, loop
        self.n = 0
        #: The zygote's children when the last reset began (the spare it lets go among them).
        self.before_reset: set[int] = set()
        self.spare()  # the one forked at start: a reset's prefork must not race it

    def attempt(self) -> str:
        self.n += 1
        return f"spare-{self.n}:0"

    def zygote(self) -> int:
        agent = self.loop.run(self.client.health()).pid
        for pid, proc in procfs.snapshot().items():
            if proc.ppid == agent and b"firepool.agent.zygote" in _cmdline(pid):
                return pid
        raise AssertionError("no warm interpreter below the agent")

    def children(self) -> set[int]:
        """The zygote's live children."""
        zygote = self.zygote()
        return {p.pid for p in procfs.snapshot().values() if p.ppid == zygote and not p.dead}

    def spare(self, timeout: float = 10.0) -> int:
        """The zygote's one child while no job runs: the spare forked after the last reset.
        The reset's answer can come before the zygote has let the spare from before it go
        (the agent's discard and prefork reach it after), so that one is not taken for it.
        Every reset here waits for its spare, and so does the start, so no earlier prefork is
        still on its way to the zygote when a reset begins."""
        deadline = time.monotonic() + timeout
        while True:
            children = self.children()
            if len(children) == 1 and not children & self.before_reset:
                return children.pop()
            assert time.monotonic() < deadline, f"the zygote's children: {children}"
            time.sleep(0.01)

    def reset_clean(self) -> None:
        self.before_reset = self.children()
        result = self.loop.run(self.client.reset())
        assert result.clean, result.reason
        self.spare()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture(scope="module", params=[m.value for m in IsolationMode])
def pod(request: pytest.FixtureRequest) -> Iterator[SparePod]:
    try:
        with backend_at(f"spare-{request.param}", isolation=request.param) as (backend, loop, _):
            _, client = loop.run(make_pod(backend, POOL))
            yield SparePod(client, loop)
    except ConfigError as exc:
        needs(f"isolation {request.param} ({exc})")


def test_a_launch_runs_in_the_child_forked_before_it(pod: SparePod) -> None:
    pod.reset_clean()
    spare = pod.spare()
    attempt = pod.attempt()
    launched = pod.loop.run(pod.client.launch(LaunchRequest(attempt=attempt, argv=py("pass"))))
    assert launched.pid == spare
    assert pod.loop.run(wait_exit(pod.client, attempt)).exit_code == 0
    pod.reset_clean()


@pytest.mark.parametrize("argv", [py("import time; time.sleep(60)"), ["sleep", "60"]],
                         ids=["fork", "exec"])  # fmt: skip
def test_no_spare_exists_while_a_job_runs(pod: SparePod, argv: list[str]) -> None:
    """The job is the zygote's only child: nothing it could tamper with (as the same uid, or
    through a shared mount namespace) becomes the next caller's job. The spare comes after
    the reset, as a new process."""
    pod.reset_clean()
    attempt = pod.attempt()
    job = pod.loop.run(pod.client.launch(LaunchRequest(attempt=attempt, argv=argv))).pid
    time.sleep(0.2)  # time for a spare to appear, if anything made one
    assert pod.children() == {job}
    pod.loop.run(pod.client.stop(attempt, grace_s=0))
    pod.reset_clean()
    assert pod.spare() != job


def test_the_spare_runs_as_root_until_its_job_comes_and_gets_the_jobs_identity(
    pod: SparePod,
) -> None:
    pod.reset_clean()
    spare = pod.spare()
    assert procfs.real_uid(spare) == 0
    seen = pod.loop.run(
        json_job(
            pod.client,
            pod.attempt(),
            "import os, json; print(json.dumps([os.getresuid(), os.getsid(0) == os.getpid(), "
            "os.environ.get('FIREPOOL_SPARE_PROBE')]))",
        )
    )
    health = pod.loop.run(pod.client.health())
    assert seen[0] == [health.job_uid] * 3  # dropped for good: real, effective, saved
    assert seen[1] is True  # a session of its own, as a fresh fork gets
    assert seen[2] is None  # the request's environment, not the zygote's
    pod.reset_clean()


def test_the_spare_is_named_while_it_waits_and_its_job_looks_like_a_fresh_fork(
    pod: SparePod,
) -> None:
    """`ps` tells a waiting spare from a job; a Python job forked from it shows the name a
    fresh fork of the zygote shows."""
    pod.reset_clean()
    spare = pod.spare()
    # The spare exists from its fork; it takes the name once prepared (setsid, own /proc).
    wait_until("the spare takes its name", lambda: _comm(spare) == SPARE_NAME, timeout=10)
    attempt = pod.attempt()
    job = pod.loop.run(pod.client.launch(
        LaunchRequest(attempt=attempt, argv=py("import time; time.sleep(60)")))).pid
    assert job == spare and _comm(job) == _comm(pod.zygote())
    pod.loop.run(pod.client.stop(attempt, grace_s=0))
    pod.reset_clean()


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")


def test_a_spare_that_died_is_replaced_by_a_fresh_fork(pod: SparePod) -> None:
    pod.reset_clean()
    spare = pod.spare()
    os.kill(spare, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while spare in pod.children():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    event, out = pod.loop.run(run_job(pod.client, pod.attempt(), py("print('ran')")))
    assert event.exit_code == 0 and out == "ran\n"
    pod.reset_clean()


def test_a_reset_with_no_launch_between_lets_the_old_spare_go(pod: SparePod) -> None:
    pod.reset_clean()
    first = pod.spare()
    pod.reset_clean()
    second = pod.spare()
    assert second != first and not procfs.alive(first)
    event, _ = pod.loop.run(run_job(pod.client, pod.attempt(), py("pass")))
    assert event.exit_code == 0
    pod.reset_clean()


def test_a_launch_that_binds_a_directory_is_not_given_a_spare_forked_before_the_bind() -> None:
    """With its own /proc, a child copies the pod's mounts when it is prepared: a spare
    prepared before a launch bound the job's checkpoint directory would not see it."""
    if not os.access("/var/lib", os.W_OK):
        needs("a writable /var/lib")
    data = Path("/var/lib") / new_root("spare-attach").name
    (data / "pods").mkdir(parents=True)
    checkpoints = data / "checkpoints" / "job-a"
    checkpoints.mkdir(parents=True)
    loop = Loop()
    backend = LocalBackend(data / "pods", isolation=IsolationMode.PRIVATE)
    try:
        _, client = loop.run(make_pod(backend, POOL))
        pod = SparePod(client, loop)
        code = (
            "import os, json\n"
            "d = os.environ['FIREPOOL_CHECKPOINT_DIR']\n"
            "open(os.path.join(d, 'seen'), 'a').write('x')\n"
            "print(json.dumps(os.getpid()))"
        )
        env = {"FIREPOOL_CHECKPOINT_DIR": str(checkpoints)}
        for n in range(2):  # the second launch meets a spare forked well before its bind
            pod.reset_clean()
            spare = pod.spare()
            attempt = f"job-a:{n}"
            event, out = loop.run(run_job(client, attempt, py(code), topology_env=env))
            assert event.exit_code == 0, out
            assert loop.run(client.status(attempt)).pid != spare
        assert (checkpoints / "seen").read_text() == "xx"
        assert json.loads(out) >= 1
        pod.reset_clean()
    except ConfigError as exc:
        needs(f"private isolation ({exc})")
    finally:
        loop.run(backend.close())
        loop.close()
        shutil.rmtree(data, ignore_errors=True)


def test_the_agent_sees_the_warm_interpreter_die_while_a_spare_waits() -> None:
    """The spare holds none of the zygote's descriptors (its socket to the agent above all),
    only its stdio, its channel and its set-up pipe; when the zygote dies the spare ends and
    the agent sees the end of its socket at once: the pod is unhealthy, as with no spare."""
    with backend_at("spare-death") as (backend, loop, _):
        _, client = loop.run(make_pod(backend, POOL))
        pod = SparePod(client, loop)
        spare = pod.spare()
        zygote = pod.zygote()
        deadline = time.monotonic() + 10
        while len(held := [int(fd) for fd in os.listdir(f"/proc/{spare}/fd")]) > 5:
            assert time.monotonic() < deadline, held  # still preparing: closes them next
            time.sleep(0.01)
        assert len([fd for fd in held if fd > 2]) == 2, held
        os.kill(zygote, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while loop.run(client.health()).ok:
            assert time.monotonic() < deadline, "the agent did not see the zygote die"
            time.sleep(0.02)

"""A job's stdout and stderr are anonymous pipes handed over with the spawn request, and an
attempt's log files exist only once it wrote something. A real agent in a real local pod.

Per attempt the pod used to create a log directory, two named FIFOs and two files, and the
reset unlinked them all again: inodes allocated and freed on the pod's disk for every job,
printing or not. Now nothing is made for a silent attempt, the job holds descriptors only (no
path into the agent's log directory), and neither the agent nor the warm interpreter keeps a
write end that would hold the stream open past the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pod_helpers import backend_at, make_pod, py, read_log, run_job
from test_server_bad_input import Pod

from firepool.agent import procfs
from firepool.agent.layout import safe_name
from firepool.protocol import LaunchRequest
from firepool.testing.control import cpu_pool

pytestmark = pytest.mark.timeout(120)

POOL = cpu_pool(memory_mib_per_pod=256)


class PipePod(Pod):
    root: Path

    def logs_of(self, attempt: str) -> Path:
        return self.root / self.record.name / "logs" / safe_name(attempt)

    def agent_pid(self) -> int:
        return self.loop.run(self.client.health()).pid

    def zygote_pid(self) -> int:
        agent = self.agent_pid()
        for pid, proc in procfs.snapshot().items():
            if proc.ppid == agent and b"firepool.agent.zygote" in _cmdline(pid):
                return pid
        raise AssertionError("no warm interpreter below the agent")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descriptors_on(pid: int, target: str) -> int:
    """How many of the process's descriptors lead to `target` (e.g. 'pipe:[123]')."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == target
    return count


@pytest.fixture(scope="module")
def pod() -> Iterator[PipePod]:
    with backend_at("pipes") as (backend, loop, root):
        record, client = loop.run(make_pod(backend, POOL))
        made = PipePod(record, client, loop)
        made.root = root
        yield made


@pytest.mark.parametrize(
    ("attempt", "argv"),
    [("silent-1:0", py("pass")), ("silent-2:0", ["true"])],
    ids=["fork", "exec"],
)
def test_a_silent_attempt_makes_no_log_files_and_reads_as_empty(
    pod: PipePod, attempt: str, argv: list[str]
) -> None:
    event, out = pod.loop.run(run_job(pod.client, attempt, argv))
    assert event.exit_code == 0 and out == ""
    assert not pod.logs_of(attempt).exists()
    assert pod.loop.run(read_log(pod.client, attempt, "stderr")) == ""

    async def follow(stream: str) -> bytes:
        return b"".join([c async for c in pod.client.logs(attempt, stream, follow=True)])

    assert pod.loop.run(follow("stdout")) == b""  # ends at the exit, does not wait for a file
    result = pod.loop.run(pod.client.reset())
    assert result.clean and result.logs_unacked == {}


def test_only_the_stream_written_to_gets_a_file(pod: PipePod) -> None:
    attempt = "half-1:0"
    event, out = pod.loop.run(run_job(pod.client, attempt, py("import sys; sys.stderr.write('e')")))
    assert event.exit_code == 0 and out == ""
    assert sorted(os.listdir(pod.logs_of(attempt))) == ["stderr"]
    assert pod.loop.run(read_log(pod.client, attempt, "stderr")) == "e"
    result = pod.loop.run(pod.client.reset())
    assert result.clean and result.logs_unacked == {"stderr": 1}


@pytest.mark.parametrize(
    ("attempt", "argv"),
    [
        ("held-1:0", py("import os, time\nfor fd in (1, 2): print(os.readlink(f'/proc/self/fd/{fd}'), flush=True)\ntime.sleep(60)")),  # noqa: E501
        ("held-2:0", ["sh", "-c", "readlink /proc/self/fd/1 /proc/self/fd/2; exec sleep 60"]),
    ],
    ids=["fork", "exec"],
)
def test_the_job_alone_holds_its_streams_write_ends(
    pod: PipePod, attempt: str, argv: list[str]
) -> None:
    pod.loop.run(pod.client.launch(LaunchRequest(attempt=attempt, argv=argv)))
    deadline = time.monotonic() + 30
    while len(lines := pod.loop.run(read_log(pod.client, attempt)).split()) < 2:
        assert time.monotonic() < deadline, lines
        pod.loop.run(asyncio.sleep(0.02))
    assert all(line.startswith("pipe:[") for line in lines), lines  # no named FIFO, no file
    agent, zygote = pod.agent_pid(), pod.zygote_pid()
    for pipe in lines:
        assert _descriptors_on(zygote, pipe) == 0  # closed right after the fork
        assert _descriptors_on(agent, pipe) == 1  # the copier's read end, no write end
    pod.loop.run(pod.client.stop(attempt, grace_s=0))
    for pipe in lines:  # the copier saw the end of the stream and let go
        assert _descriptors_on(agent, pipe) == 0
    assert pod.loop.run(pod.client.reset()).clean

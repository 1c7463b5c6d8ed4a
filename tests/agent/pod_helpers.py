"""Shared helpers for agent and backend tests: real pods, real processes, bounded waits."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import textwrap
import threading
import time
import uuid
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from firepool.agent import procfs
from firepool.backends.agent_client import AgentClient
from firepool.backends.base import PodCreate, PodRecord
from firepool.backends.local import LocalBackend
from firepool.model import PoolSpec
from firepool.protocol import ExitEvent, LaunchRequest

T = TypeVar("T")

#: Pods live outside /tmp so a private mount namespace can put its own tmpfs on /tmp.
TEST_ROOT = Path("/var/tmp")


def new_root(tag: str) -> Path:
    return TEST_ROOT / f"firepool-test-{tag}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Loop:
    """One event loop per test module, so async clients and locks stay on one loop."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()

    def run(self, aw: Awaitable[T], timeout: float = 60.0) -> T:
        async def bounded() -> T:
            return await asyncio.wait_for(aw, timeout)

        return self.runner.run(bounded())

    def close(self) -> None:
        self.runner.close()


class EventSink:
    """A tiny broker stand-in that records exit events pushed by agents."""

    def __init__(self, secret_check: bool = True) -> None:
        self.events: list[ExitEvent] = []
        self.auth: list[str] = []
        self.cond = threading.Condition()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink.cond:
                    sink.events.append(ExitEvent.model_validate_json(body))
                    sink.auth.append(self.headers.get("Authorization", ""))
                    sink.cond.notify_all()
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/events"

    def wait_for(self, attempt: str, timeout: float = 10.0) -> ExitEvent:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for ev in self.events:
                    if ev.attempt == attempt:
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no exit event for {attempt}")
                self.cond.wait(left)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def py(code: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code)]


async def wait_exit(client: AgentClient, attempt: str, timeout: float = 20.0) -> ExitEvent:
    deadline = time.monotonic() + timeout
    while True:
        status = await client.status(attempt)
        if status.exit is not None:
            return status.exit
        if time.monotonic() > deadline:
            raise TimeoutError(f"{attempt} still running")
        await asyncio.sleep(0.01)


async def read_log(client: AgentClient, attempt: str, stream: str = "stdout") -> str:
    chunks = [c async for c in client.logs(attempt, stream)]
    return b"".join(chunks).decode()


async def run_job(
    client: AgentClient, attempt: str, argv: list[str], **kw: Any
) -> tuple[ExitEvent, str]:
    await client.launch(LaunchRequest(attempt=attempt, argv=argv, **kw))
    event = await wait_exit(client, attempt)
    return event, await read_log(client, attempt)


async def json_job(client: AgentClient, attempt: str, code: str) -> Any:
    event, out = await run_job(client, attempt, py(code))
    assert event.exit_code == 0, (event, await read_log(client, attempt, "stderr"))
    return json.loads(out.strip().splitlines()[-1])


async def make_pod(
    backend: LocalBackend, pool: PoolSpec, **kw: Any
) -> tuple[PodRecord, AgentClient]:
    record = await backend.create(PodCreate(pool=pool, **kw))
    await backend.wait_ready(record.name, timeout=30)
    return record, backend.agent(record)


def pods_processes(root: Path, uids: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """Live processes of the pods under `root`: their command line or environment mentions the
    root (a job's `sleep` child inherits HOME and PYTHONPATH below it), or they run as one of
    the pods' uids (a child that cleared its environment). Should be none after a delete."""
    needle = str(root).encode()
    found = []
    me = os.getpid()
    for pid, proc in procfs.snapshot().items():
        if pid == me or proc.dead:
            continue
        if uids and procfs.real_uid(pid) in uids:
            found.append(pid)
            continue
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as fh:
                    if needle in fh.read():
                        found.append(pid)
                        break
            except OSError:
                pass
    return found


@contextmanager
def backend_at(tag: str, **kw: Any) -> Iterator[tuple[LocalBackend, Loop, Path]]:
    root = new_root(tag)
    loop = Loop()
    backend = LocalBackend(root, **kw)
    try:
        yield backend, loop, root
    finally:
        loop.run(backend.close())
        loop.close()
        left = pods_processes(root, backend.uids_handed_out)
        for pid in left:
            procfs.kill_quietly(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"stray pod processes after close: {left}"

"""The five systems `bench peers` compares, behind one small interface: run a job body for a
caller and say when it was submitted, when it was done and what it printed.

"Done" is each system's own end of a job as its caller can rely on it: firepool's terminal
state committed (the job's `finished` timing, this machine's clock), a subprocess's exit as
`wait` returns it, a Ray call's result in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from firepool.bench.peers.broker import BrokerProcess

#: The probe rounds' pools: "next" (another caller looks), "same" (the same caller looks).
PROBE_POOLS = {"next": "probe", "same": "probe-same"}


@dataclass(frozen=True)
class Outcome:
    submitted: float
    done: float
    output: str
    ok: bool
    #: Where it ran, when the system says (a pod's name; an actor's index).
    place: str = ""


class System(Protocol):
    name: str
    label: str

    async def start(self, callers: Sequence[str]) -> None: ...

    async def run(
        self, caller: str, body: str, *, stream: str, probe: str | None = None
    ) -> Outcome:
        """Run `body` for `caller`; jobs of one `stream` may share a warm worker. `probe`
        names the hostile-job probe's round ("next" or "same" caller) a job belongs to."""
        ...

    async def stop(self) -> None: ...


class Firepool:
    """firepool's embedded broker in a child process, local pods, reached over HTTP by the SDK.
    `reuse`: a stable lease tag per caller stream (warm pods); otherwise a single-use pod per
    job. Probe jobs go to one-pod pools (see `broker`): with reuse on, the same caller's next
    probe job runs on the pod its planting job used, after that pod's reset."""

    def __init__(self, data_dir: Path, *, reuse: bool, cap: int) -> None:
        self.reuse = reuse
        self.name = "firepool_reuse" if reuse else "firepool_fresh"
        self.label = "firepool, local pods, reuse on" if reuse else "firepool, fresh pod per job"
        self._broker = BrokerProcess(data_dir, cap=cap)
        self._clients: dict[str, Any] = {}
        self._counter = 0

    async def start(self, callers: Sequence[str]) -> None:
        from firepool.client.aio import AsyncClient

        url, tokens = await asyncio.to_thread(self._broker.start, list(callers))
        self._clients = {c: AsyncClient(url, tokens[c]) for c in callers}

    async def run(
        self, caller: str, body: str, *, stream: str, probe: str | None = None
    ) -> Outcome:
        client = self._clients[caller]
        self._counter += 1
        tag = f"{caller}/{stream}" if self.reuse else f"{caller}/{stream}/{self._counter}"
        submitted = time.time()
        job = await client.run(
            PROBE_POOLS[probe] if probe else f"peers-{stream}",
            ["python", "-c", body],
            wait_timeout=600,
            lease_tag=tag,
            single_use=not self.reuse,
        )
        output = "".join([chunk async for chunk in client.logs(job.id)])
        return Outcome(
            submitted,
            job.timings.finished or time.time(),
            output,
            job.state.value == "SUCCEEDED",
            job.pods[0].name if job.pods else "",
        )

    async def stop(self) -> None:
        for client in self._clients.values():
            await client.close()
        await asyncio.to_thread(self._broker.stop)


class Subprocess:
    """No broker: a fresh `python -c BODY` per job on this machine, as a script would do."""

    name = "subprocess"
    label = "fresh subprocess per job (no broker)"

    async def start(self, callers: Sequence[str]) -> None:
        return None

    async def run(
        self, caller: str, body: str, *, stream: str, probe: str | None = None
    ) -> Outcome:
        submitted = time.time()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", body, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        return Outcome(submitted, time.time(), out.decode(), proc.returncode == 0)

    async def stop(self) -> None:
        return None


def exec_body(body: str) -> str:
    """Run a job body inside a Ray worker, returning what it printed."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(body, "<job>", "exec"), {"__name__": "__main__"})
    return buffer.getvalue()


class _Worker:
    """A persistent Ray actor: runs bodies one after another, nothing reset in between."""

    def run(self, body: str) -> str:
        return exec_body(body)


class RayPool:
    """A pool of persistent Ray actors (one per unit of the cap), handed out first come; the
    probe's jobs all run on the first actor, as in a pool with one free worker."""

    name = "ray_pool"
    label = "Ray actor pool (persistent workers)"

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._actors: list[Any] = []
        self._free: asyncio.Queue[int] = asyncio.Queue()

    async def start(self, callers: Sequence[str]) -> None:
        import ray

        worker = ray.remote(num_cpus=0)(_Worker)
        self._actors = [worker.remote() for _ in range(self.cap)]
        await asyncio.gather(*(a.run.remote("pass") for a in self._actors))  # all up
        for i in range(self.cap):
            self._free.put_nowait(i)

    async def run(
        self, caller: str, body: str, *, stream: str, probe: str | None = None
    ) -> Outcome:
        if probe:
            submitted = time.time()
            out = await self._actors[0].run.remote(body)
            return Outcome(submitted, time.time(), out, True, "actor-0")
        index = await self._free.get()
        try:
            submitted = time.time()
            out = await self._actors[index].run.remote(body)
            return Outcome(submitted, time.time(), out, True, f"actor-{index}")
        finally:
            self._free.put_nowait(index)

    async def stop(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor)
        self._actors = []


def _task(body: str) -> str:
    return exec_body(body)


class RayTasks:
    """Ray tasks: each job a remote function call on Ray's own (reused) worker processes."""

    name = "ray_task"
    label = "Ray tasks"

    def __init__(self) -> None:
        self._remote: Any = None

    async def start(self, callers: Sequence[str]) -> None:
        import ray

        self._remote = ray.remote(num_cpus=1)(_task)
        await asyncio.gather(*(self._remote.remote("pass") for _ in range(4)))  # workers up

    async def run(
        self, caller: str, body: str, *, stream: str, probe: str | None = None
    ) -> Outcome:
        submitted = time.time()
        out = await self._remote.remote(body)
        return Outcome(submitted, time.time(), out, True)

    async def stop(self) -> None:
        return None

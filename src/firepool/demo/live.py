"""Running the broker paper's loop workloads for real: programs against a live broker.

The workloads are the simulator's own programs (`sim.agentic`: W-Agent, W-RL), so the demo and
`firepool sim loops` run the very same job sequences; here each `Run` becomes real jobs
submitted through the async SDK to an embedded broker with local pods, each `Sleep` a real
pause. Job bodies are fixed-duration sleeps, so differences between arms come from how pods
are acquired, not from the work.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from firepool.api.schemas import JobOut
from firepool.client.aio import AsyncClient
from firepool.composition import EmbeddedBroker
from firepool.model import PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.sim.agentic import Tagger, w_agent, w_rl
from firepool.sim.broker import JobRequest
from firepool.sim.programs import Program, Run, Sleep

POOL = "demo"


@dataclass(frozen=True)
class Workload:
    name: str
    callers: tuple[str, ...]
    build: Callable[[Tagger, random.Random, str], Program]
    #: The simulator's name of the same loop (`sim.experiments.runs.loop_cell`), also what
    #: `firepool demo --workloads` takes.
    key: str


WORKLOADS = (
    Workload(
        "W-Agent, 2 agents",
        ("agent-0", "agent-1"),
        lambda t, r, c: w_agent(t, r, c),
        key="agent2",
    ),
    Workload(
        "W-Agent, 4 agents",
        ("agent-0", "agent-1", "agent-2", "agent-3"),
        lambda t, r, c: w_agent(t, r, c),
        key="agent4",
    ),
    Workload("W-RL", ("trainer",), lambda t, r, c: w_rl(t, r, c), key="rl"),
)


@dataclass
class ArmResult:
    workload: str
    arm: str
    jobs: list[JobOut] = field(default_factory=list)
    makespan_s: float = 0.0
    held_pod_s: float = 0.0
    wall_s: float = 0.0


def demo_catalog(cap: int) -> Catalog:
    """One CPU pool capped like the paper's benchmark pools (a hard ceiling, no floor)."""
    pool = PoolSpec(
        name=POOL, max_count=cap, min_count=0, max_idle_count=0, idle_timeout=60.0, step=cap
    )
    return Catalog((pool,), {"cpu": cap})


def programs(workload: Workload, arm: str, seed: int) -> list[Program]:
    """The same jobs for every arm: each caller's generator is seeded by (seed, caller)."""
    tagger = Tagger(arm, POOL)
    return [
        workload.build(tagger, random.Random(f"{seed}/{workload.name}/{caller}"), caller)
        for caller in workload.callers
    ]


def count_jobs(workload: Workload, seed: int) -> int:
    total = 0
    for program in programs(workload, "on", seed):
        for command in program:
            if isinstance(command, Run):
                total += len(command.jobs)
    return total


async def run_arm(
    workload: Workload,
    arm: str,
    *,
    seed: int,
    scale: float,
    cap: int,
    data_dir: Path,
    on_job: Callable[[], None] = lambda: None,
) -> ArmResult:
    """One arm on a fresh embedded broker (no warm pods carried over from another arm)."""
    result = ArmResult(workload.name, arm)
    config = BrokerConfig(reconcile_s=5.0, hold_tick_s=0.2, exit_poll_s=1.0)
    async with EmbeddedBroker(data_dir, catalog=demo_catalog(cap), config=config) as broker:
        clients = {
            caller: AsyncClient(broker.url, await asyncio.to_thread(broker.issue, caller))
            for caller in workload.callers
        }
        sampling = asyncio.create_task(_sample_pods(broker, result))
        started = time.time()
        try:
            await asyncio.gather(
                *(
                    drive(program, clients, scale, result, on_job)
                    for program in programs(workload, arm, seed)
                )
            )
        finally:
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
            for client in clients.values():
                await client.close()
        finished = [j.timings.finished for j in result.jobs if j.timings.finished]
        result.makespan_s = (max(finished) if finished else time.time()) - started
        result.wall_s = time.time() - started
    return result


async def drive(
    program: Program,
    clients: dict[str, AsyncClient],
    scale: float,
    result: ArmResult,
    on_job: Callable[[], None],
) -> None:
    command = next(program, None)
    while command is not None:
        if isinstance(command, Sleep):
            await asyncio.sleep(command.seconds * scale)
        else:
            await asyncio.gather(
                *(_job(req, clients, scale, result, on_job) for req in command.jobs)
            )
        try:
            command = program.send(None)
        except StopIteration:
            command = None


async def _job(
    req: JobRequest,
    clients: dict[str, AsyncClient],
    scale: float,
    result: ArmResult,
    on_job: Callable[[], None],
) -> None:
    client = clients[req.caller]
    body = f"import time; time.sleep({req.duration * scale:.3f})"
    job = await client.run(
        req.pool,
        ["python", "-c", body],
        lease_tag=req.tag,
        queue=req.queue,
        single_use=req.single_use,
        wait_timeout=600,
    )
    result.jobs.append(job)
    on_job()


async def _sample_pods(broker: EmbeddedBroker, result: ArmResult, every: float = 0.1) -> None:
    """Held capacity: pod-seconds from creation to deletion, busy, idle or held alike."""
    tracker = broker.broker.tracker
    last = time.monotonic()
    while True:
        await asyncio.sleep(every)
        now = time.monotonic()
        result.held_pod_s += len(tracker.pool_pods(POOL)) * (now - last)
        last = now

"""`firepool experiment rollout`: the broker paper's template rollout under saturated load
(appendix C.3), once on real local pods.

The paper's run: an 8-pod pool (floor 4, idle cap 6, ceiling 8, drain budget 1), 12 callers
with no think time, one template edit. Here the same pool and callers on this machine's local
pods, with short fixed job bodies (the paper states none; ours are a stated choice so a run
takes minutes), two arms one after the other on fresh brokers: the edit, and no edit (for
the start-latency difference). An admin applies the edit through `PUT /v1/pools/cpu`, as
`firepool pools apply` does.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from firepool.api.schemas import JobOut
from firepool.client.aio import AsyncClient
from firepool.composition import EmbeddedBroker
from firepool.control.records import RetireReason
from firepool.model import JobState, PodState, PoolSpec, TokenRole
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog

POOL = PoolSpec(name="cpu", min_count=4, max_idle_count=6, max_count=8, idle_timeout=300.0,
                memory_mib_per_pod=512, step=8)
PAPER = {
    "converged_s": "324 [286, 359]",
    "callers_served": "12/12",
    "longest_wait_s": "181-242",
    "failed_jobs": "0",
    "max_retiring": "1",
    "max_pods": "8",
    "delta_p50_s": "+0.03",
}


@dataclass(frozen=True)
class RolloutRun:
    callers: int = 12
    job_s: tuple[float, float] = (2.0, 6.0)  # job bodies, uniform: our choice
    load_s: float = 30.0  # saturated load before the edit
    window_s: float = 120.0  # measured after the edit
    settle_s: float = 300.0  # how long past the window a rollout may still converge
    seed: int = 0


async def _arm(run: RolloutRun, edit: bool, data_dir: Path) -> dict[str, Any]:
    config = BrokerConfig(reconcile_s=5.0)
    async with EmbeddedBroker(data_dir, catalog=Catalog((POOL,), {"cpu": POOL.max_count}),
                              config=config) as embedded:
        broker = embedded.broker
        while sum(p.state is PodState.IDLE for p in broker.tracker.pool_pods("cpu")) < 4:
            await asyncio.sleep(0.2)
        rng = random.Random(run.seed)
        start = time.time()
        edit_at, end = start + run.load_s, start + run.load_s + run.window_s
        done: list[JobOut] = []

        async def caller(i: int) -> None:
            async with AsyncClient(embedded.url, embedded.issue(f"caller-{i}")) as client:
                while time.time() < end:
                    body = rng.uniform(*run.job_s)
                    job = await client.submit("cpu", [sys.executable, "-c",
                                                      f"import time; time.sleep({body:.2f})"],
                                              lease_tag=f"caller-{i}", max_retries=0)
                    done.append(await client.wait(job.id, timeout=600.0))

        seen = {"pods": 0, "retiring": 0, "converged": -1.0, "applied": -1.0}

        async def watch() -> None:
            # Past the window only to see a slow rollout finish (callers have stopped).
            while time.time() < end or (edit and seen["converged"] < 0
                                        and time.time() < end + run.settle_s):
                pods = broker.tracker.pool_pods("cpu")
                seen["pods"] = max(seen["pods"], len(pods))
                seen["retiring"] = max(seen["retiring"], sum(
                    1 for p in pods if p.state is PodState.RETIRING
                    and p.retire_after is RetireReason.STALE_TEMPLATE))
                applied = seen["applied"]
                if applied >= 0 and seen["converged"] < 0 and broker.core.rollout("cpu").done:
                    seen["converged"] = time.time() - applied
                await asyncio.sleep(0.05)

        async def apply() -> None:
            await asyncio.sleep(max(0.0, edit_at - time.time()))
            admin = embedded.issue("operator", TokenRole.ADMIN)
            async with AsyncClient(embedded.url, admin) as client:
                await client.apply_pool(POOL.model_copy(update={"template_version": 2}))
                seen["applied"] = time.time()

        tasks = [caller(i) for i in range(run.callers)] + [watch()]
        if edit:
            tasks.append(apply())
        await asyncio.gather(*tasks)
    window = [j for j in done if (j.timings.submitted or 0.0) >= edit_at]
    waits = [(j.timings.started or 0.0) - (j.timings.submitted or 0.0) for j in window]
    starts = [(j.timings.first_instruction or j.timings.started or 0.0)
              - (j.timings.submitted or 0.0) for j in window]
    return {
        "edit": edit,
        "converged_s": seen["converged"] if seen["converged"] >= 0 else None,
        "callers_served": len({j.lease_tag for j in window}),
        "longest_wait_s": max(waits) if waits else None,
        "failed_jobs": sum(1 for j in done if j.state is not JobState.SUCCEEDED),
        "max_retiring": seen["retiring"],
        "max_pods": seen["pods"],
        "start_p50_s": statistics.median(starts) if starts else None,
        "jobs": len(window),
    }


def main(run: RolloutRun, out: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="firepool-rollout-") as tmp:
        rolled = asyncio.run(_arm(run, True, Path(tmp) / "rollout"))
        plain = asyncio.run(_arm(run, False, Path(tmp) / "none"))
    delta = (rolled["start_p50_s"] or 0.0) - (plain["start_p50_s"] or 0.0)
    ours = {
        "converged_s": "never" if rolled["converged_s"] is None else f"{rolled['converged_s']:.1f}",
        "callers_served": f"{rolled['callers_served']}/{run.callers}",
        "longest_wait_s": f"{rolled['longest_wait_s']:.1f}",
        "failed_jobs": str(rolled["failed_jobs"] + plain["failed_jobs"]),
        "max_retiring": str(rolled["max_retiring"]),
        "max_pods": str(max(rolled["max_pods"], plain["max_pods"])),
        "delta_p50_s": f"{delta:+.2f}",
    }
    labels = {
        "converged_s": "converged after the edit (s)",
        "callers_served": "callers served after the edit",
        "longest_wait_s": "longest wait after the edit (s)",
        "failed_jobs": "failed jobs (both arms)",
        "max_retiring": "old pods retiring at once (max)",
        "max_pods": "pods (max, ceiling 8)",
        "delta_p50_s": "start p50 vs the no-edit arm (s)",
    }
    rows = [f"| {labels[k]} | {PAPER[k]} | {ours[k]} |" for k in PAPER]
    md = "| quantity | paper (C.3) | ours (local pods) |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    result = {"run": asdict(run), "paper": PAPER, "ours": ours, "arms": [rolled, plain]}
    (out / "rollout.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "rollout.md").write_text(md)
    print(md)
    return result

"""`firepool experiment elastic`: the scheduler paper's failure experiment (its section V-F),
scaled to one machine and run for real under the broker.

Four elastic training jobs (`examples/elastic-cifar`, PyTorch on CPU over gloo) share four
pod slots. Each run is one (policy, lambda, seed): a fresh embedded broker, the example
uploaded as a package, the jobs submitted at seeded arrival times, rounds every `round_s`,
and failures injected by the broker itself (Poisson, lambda per round per running job, every
rank SIGKILLed, the job resumes from its last periodic checkpoint). A resize is the real
thing too: SIGTERM, checkpoint, a new attempt at the new world size.

Paired seeds: the same seed gives every policy the same jobs, arrivals and failure stream
seed (the failures themselves depend on which attempts are running, as in the paper).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from firepool.client.aio import AsyncClient
from firepool.composition import EmbeddedBroker
from firepool.model import NetworkAccess, PodState, PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.service.elastic import ElasticConfig

POOL = "slots"


@dataclass(frozen=True)
class ElasticExperiment:
    policies: tuple[str, ...] = ("oak", "sia")
    lambdas: tuple[float, ...] = (0.0, 0.05, 0.10)
    seeds: tuple[int, ...] = (0, 1, 2)
    jobs: int = 4
    slots: int = 4
    round_s: float = 10.0
    mean_gap_s: float = 5.0  # Poisson arrivals
    steps: tuple[int, ...] = (100, 150, 200)  # each job's length is drawn from these
    p_restart_s: float | None = 3.0  # measured restart of the example here (see docs)
    max_retries: int = 100
    #: Imported once per pod by its warm interpreter, so an attempt's ranks start by fork
    #: instead of importing PyTorch each time (the broker paper's warm pods, for training).
    preload: tuple[str, ...] = ("torch",)
    run_timeout_s: float = 900.0
    example: Path = field(default_factory=lambda: default_example())
    #: Passed to train.py: a batch half the example's default keeps a run near a minute here.
    extra_args: tuple[str, ...] = ("--global-batch", "32", "--checkpoint-every", "20",
                                   "--report-every-s", "1")


@dataclass
class JobResult:
    name: str
    steps: int
    jct_s: float
    restarts: int
    state: str


@dataclass
class RunResult:
    policy: str
    lam: float
    seed: int
    jobs: list[JobResult]
    failures_injected: int
    rounds: int
    decide_ms: list[float]
    wall_s: float

    @property
    def mean_jct(self) -> float:
        return statistics.fmean(j.jct_s for j in self.jobs)

    @property
    def max_jct(self) -> float:
        return max(j.jct_s for j in self.jobs)

    @property
    def restarts(self) -> int:
        return sum(j.restarts for j in self.jobs)


def default_example() -> Path:
    """The example next to the source tree (a checkout); `--example` points elsewhere."""
    return Path(__file__).resolve().parents[3] / "examples" / "elastic-cifar"


def workload(exp: ElasticExperiment, seed: int) -> list[tuple[float, int]]:
    """(arrival offset, steps) per job: fixed by the seed alone, identical for every policy."""
    rng = random.Random(f"elastic-experiment/{seed}")
    out: list[tuple[float, int]] = []
    at = 0.0
    for _ in range(exp.jobs):
        out.append((at, rng.choice(exp.steps)))
        at += rng.expovariate(1.0 / exp.mean_gap_s)
    return out


def catalog(exp: ElasticExperiment) -> Catalog:
    pool = PoolSpec(
        name=POOL,
        min_count=exp.slots,
        max_idle_count=exp.slots,
        max_count=exp.slots,
        idle_timeout=3600.0,
        memory_mib_per_pod=2048,
        step=exp.slots,
        preload_modules=exp.preload,
        network=NetworkAccess.HOST,  # a job's ranks rendezvous over TCP between pods
    )
    return Catalog((pool,), {"cpu": exp.slots})


async def run_one(exp: ElasticExperiment, policy: str, lam: float, seed: int,
                  data_dir: Path) -> RunResult:
    config = BrokerConfig(
        dispatch_tick_s=1.0,
        reconcile_s=2.0,
        exit_poll_s=1.0,
        elastic=ElasticConfig(
            policy=policy,
            round_s=exp.round_s,
            tick_s=0.1,
            stop_grace_s=60.0,
            failure_rate=lam,
            failure_seed=seed,
        ),
    )
    started = time.monotonic()
    async with EmbeddedBroker(data_dir, catalog=catalog(exp), config=config) as embedded:
        client = AsyncClient(embedded.url, embedded.token)
        try:
            digest = await client.upload_package(exp.example)
            await _wait_for_slots(embedded, exp.slots)
            submitted: list[tuple[str, int]] = []
            begin = time.monotonic()
            for index, (offset, steps) in enumerate(workload(exp, seed)):
                await asyncio.sleep(max(0.0, begin + offset - time.monotonic()))
                job = await client.submit(
                    POOL,
                    ["python", "train.py", "--steps", str(steps), "--seed", str(index),
                     *exp.extra_args],
                    package=digest,
                    kind="elastic",
                    elastic={"app": "cifar10", "min_pods": 1, "max_pods": exp.slots,
                             "p_restart_s": exp.p_restart_s},
                    max_retries=exp.max_retries,
                    timeout_s=None,
                )
                submitted.append((job.id, steps))
            finals = await asyncio.gather(
                *(client.wait(job_id, timeout=exp.run_timeout_s) for job_id, _ in submitted)
            )
        finally:
            await client.close()
        driver = embedded.broker.elastic
        now = time.time()
        jobs = []
        for (job_id, steps), final in zip(submitted, finals, strict=True):
            t = final.timings
            jct = (t.finished or now) - (t.submitted or now)
            jobs.append(JobResult(job_id, steps, jct, driver.times(job_id, now).restarts,
                                  final.state.value))
        return RunResult(policy, lam, seed, jobs, driver.injected, driver.rounds,
                         list(driver.decide_ms), time.monotonic() - started)


async def _wait_for_slots(embedded: EmbeddedBroker, count: int, timeout: float = 120.0) -> None:
    """Start every run from warm, ready slots so that pod creation is not part of the JCTs."""
    deadline = time.monotonic() + timeout
    tracker = embedded.broker.tracker
    while sum(p.state is PodState.IDLE for p in tracker.pool_pods(POOL)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} slots were not ready after {timeout}s")
        await asyncio.sleep(0.2)


def run_all(exp: ElasticExperiment, out_dir: Path,
            progress: Callable[[str], None] = print) -> list[RunResult]:
    """Every (seed, lambda, policy) in turn (one machine: runs must not overlap)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    total = len(exp.seeds) * len(exp.lambdas) * len(exp.policies)
    with tempfile.TemporaryDirectory(prefix="firepool-elastic-") as scratch:
        for seed in exp.seeds:
            for lam in exp.lambdas:
                for policy in exp.policies:
                    data = Path(scratch) / f"{policy}-{lam}-{seed}"
                    result = asyncio.run(run_one(exp, policy, lam, seed, data))
                    results.append(result)
                    progress(
                        f"[{len(results)}/{total}] {policy:<5} lambda={lam:.2f} seed={seed}: "
                        f"mean JCT {result.mean_jct:.1f}s max {result.max_jct:.1f}s "
                        f"restarts {result.restarts} failures {result.failures_injected} "
                        f"({result.wall_s:.0f}s)"
                    )
                    (out_dir / "runs.json").write_text(
                        json.dumps([_as_json(r) for r in results], indent=2)
                    )
    return results


def _as_json(result: RunResult) -> dict[str, object]:
    data = asdict(result)
    data["mean_jct"] = result.mean_jct
    data["max_jct"] = result.max_jct
    data["restarts"] = result.restarts
    return data


@dataclass(frozen=True)
class Row:
    policy: str
    lam: float
    mean_jct: float
    std_jct: float  # across seeds, of each run's mean JCT
    max_jct: float  # worst job over every seed
    restarts: float  # per run
    failures: float  # per run
    decide_p50_ms: float
    decide_p95_ms: float
    unfinished: int


def summarise(results: Sequence[RunResult]) -> list[Row]:
    rows = []
    keys = sorted({(r.lam, r.policy) for r in results})
    for lam, policy in keys:
        runs = [r for r in results if r.lam == lam and r.policy == policy]
        means = [r.mean_jct for r in runs]
        decide = sorted(ms for r in runs for ms in r.decide_ms) or [float("nan")]
        rows.append(Row(
            policy=policy,
            lam=lam,
            mean_jct=statistics.fmean(means),
            std_jct=statistics.stdev(means) if len(means) > 1 else 0.0,
            max_jct=max(r.max_jct for r in runs),
            restarts=statistics.fmean(r.restarts for r in runs),
            failures=statistics.fmean(r.failures_injected for r in runs),
            decide_p50_ms=decide[len(decide) // 2],
            decide_p95_ms=decide[min(len(decide) - 1, int(len(decide) * 0.95))],
            unfinished=sum(j.state != "SUCCEEDED" for r in runs for j in r.jobs),
        ))
    return rows


def markdown(rows: Sequence[Row], exp: ElasticExperiment) -> str:
    lines = [
        f"Real run: {exp.jobs} elastic-cifar jobs, {exp.slots} slots, rounds of "
        f"{exp.round_s:g} s, seeds {list(exp.seeds)}; JCT in seconds.",
        "",
        "| policy | lambda | mean JCT | std (seeds) | max JCT | restarts/run | failures/run "
        "| decision p50 ms | p95 ms | unfinished |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.policy} | {r.lam:.2f} | {r.mean_jct:.1f} | {r.std_jct:.1f} | "
            f"{r.max_jct:.1f} | {r.restarts:.1f} | {r.failures:.1f} | "
            f"{r.decide_p50_ms:.2f} | {r.decide_p95_ms:.2f} | {r.unfinished} |"
        )
    return "\n".join(lines) + "\n"


def main(exp: ElasticExperiment, out_dir: Path) -> list[Row]:
    if not (exp.example / "train.py").is_file():
        raise FileNotFoundError(f"no train.py in {exp.example}; pass --example DIR")
    results = run_all(exp, out_dir, progress=lambda line: print(line, file=sys.stderr))
    rows = summarise(results)
    table = markdown(rows, exp)
    (out_dir / "elastic.md").write_text(table)
    (out_dir / "elastic.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    print(table)
    return rows

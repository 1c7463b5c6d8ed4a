"""`python -m firepool.bench throughput`: end-to-end jobs per second through the real broker.

`python -m firepool.bench throughput [--pods 16] [--callers 32] [--seconds 20] [--json PATH]`

The broker runs as `firepool serve` does (embedded: uvicorn on 127.0.0.1 port 0, SQLite or
`--store URL`, real local process pods) in a child process of its own, so its CPU time can be
read from /proc without the callers' share. This process is the callers: `--callers` asyncio
tasks, each with its own token and SDK `AsyncClient`, each running `python -c pass` with
`client.run` back to back (one request per job: the submission waits for the job's end).

The `cpu` pool has floor = ceiling = `--pods`, created before anything is timed. A used pod
only ever serves its own caller again (owner-only reuse), so with more callers than pods the
callers share `--identities` caller identities (default min(callers, pods)): every token is
distinct, every identity keeps one warm pod, and callers of one identity queue for it as
callers of one account would. Each identity then has a warm pod, and only queueing (no pod
creation) sits between a submission and its start.

How 32 callers share 16 pods (the issue's target shape), decided: 16 identities x 2 tokens.
The alternatives break the premise: 32 identities on 16 pods means half the identities never
get a pod they may reuse (a used pod is never handed to another caller; holds keep it), so
the run measures hold expiry and pod churn, not warm starts; 32 pods is another shape. With
two callers per identity, a job usually finds its pod busy with its sibling's job and waits
for it, so `warm_start` (submit -> first instruction) includes that queueing: about one pod
cycle (the sibling's launch, run, exit, log drain and reset). That is why the figures are
split: `queue_wait` (submit -> RUNNING committed, which is mostly waiting for the own pod)
and `pod_to_first_instruction` (RUNNING committed -> process started: the warm start proper,
once the pod is the job's). With one caller per identity (`--callers 16`) the two coincide.

Before the load, each identity runs one job, all at once, so each takes one never-used pod of
its own (`_take_one_pod_each`). After `--warmup` seconds of the load, jobs are counted for
`--seconds`. The figures come from each job's recorded timings (the broker's clock, this
machine's wall clock), over the jobs whose terminal state was committed in the window:
- jobs_per_s: those jobs / window;
- warm_start_ms: submitted -> first instruction (the process start, for `python -c pass`),
  which includes any wait for the identity's pod; split into queue_wait_ms (submitted ->
  RUNNING committed) and pod_to_first_instruction_ms (committed -> first instruction);
- latency_ms: submitted -> terminal state committed;
- broker_cpu_ms_per_job: the broker process's own user + system CPU over the window (not its
  pods', which are separate processes) / those jobs. It includes the callers' polls.
- agents / interpreters / jobs_cpu_ms_per_job: the pods' CPU by role (`pods_cpu_ms_per_job`
  is their sum), and callers_cpu_ms_per_job this process's;
- ceiling_jobs_per_s_without_broker_and_pods: cores / (jobs' own + callers' CPU per job), the
  rate no broker could pass on these cores with these callers and a process per job.
The timings are read back from the child's store after the run (`started` is recorded off the
critical path); `store_jobs_in_window` counts the store's terminal jobs in the window, a check
on the callers' own tally (`store_agrees`). The pods are deleted when the broker exits.

With `--scrape-every S` a scraper GETs `/metrics` every S seconds through the window, as
Prometheus would: `scrape_ms_p50/p99` is what it waited (HTTP included, so an upper bound on
the scrape's own cost under load); compare `jobs_per_s` with a run without it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import os
import re
import resource
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from firepool.bench.common import (
    CLOCK_TICKS,
    cpu_seconds,
    machine,
    percentile,
    print_table,
    proc_stat,
    write_json,
)
from firepool.bench.flood import FLOOD_SETTLE_S, scrape_in_phases
from firepool.bench.flood import summarize as flood_summary
from firepool.service.tuning import run_serving

if TYPE_CHECKING:  # the callers import the SDK when they start (see `_caller`)
    from firepool.api.schemas import JobOut
    from firepool.client import AsyncClient

COMMAND = ("python", "-c", "pass")
TARGET_JOBS_PER_S = 200.0
TARGET_WARM_P99_MS = 50.0
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _serve(
    data_dir: str,
    store_url: str | None,
    pods: int,
    identities: list[str],
    ready: Any,
    stop: Any,
    window: Any,
    counted: Any,
) -> None:
    """Child process: the embedded broker with one `cpu` pool of `pods` pods, serving until
    `stop` is set; then answer which of the jobs the parent names the store holds terminal."""
    # on uvloop where installed, as `firepool serve` runs
    run_serving(_serve_async(data_dir, store_url, pods, identities, ready, stop, window, counted))


async def _serve_async(
    data_dir: str,
    store_url: str | None,
    pods: int,
    identities: list[str],
    ready: Any,
    stop: Any,
    window: Any,
    counted: Any,
) -> None:
    from firepool.composition import EmbeddedBroker
    from firepool.model import PoolSpec
    from firepool.service.catalog import Catalog

    pool = PoolSpec(
        name="cpu",
        min_count=pods,
        max_count=pods,
        step=max(1, pods),  # one scaler pass creates the whole floor
        idle_timeout=3600.0,  # nothing retires during a run
    )
    async with EmbeddedBroker(
        Path(data_dir),
        store_url=store_url,
        catalog=Catalog((pool,)),
        delete_pods_on_exit=True,
        tune_gc=True,  # as `firepool serve` does
    ) as broker:
        tokens = [await asyncio.to_thread(broker.issue, name) for name in identities]
        ready.put((broker.url, tokens, os.getpid()))
        await asyncio.to_thread(stop.wait)
        job_ids = await asyncio.to_thread(window.get)
        counted.put(await asyncio.to_thread(_terminal_in_store, broker.store, job_ids))


def _terminal_in_store(
    store: Any, job_ids: set[str]
) -> dict[str, tuple[str, dict[str, float | None]]]:
    """State and timings of this run's jobs that the store holds terminal. Read after the run:
    `started` is recorded off the critical path and may land after a caller saw the end."""
    from firepool.model import JobState

    terminal = [JobState(s) for s in TERMINAL]
    out: dict[str, tuple[str, dict[str, float | None]]] = {}
    after: str | None = None
    while True:
        page = store.list_jobs(states=terminal, limit=1000, after=after)
        if not page:
            return out
        for job in page:
            if job.id in job_ids:
                out[job.id] = (job.state.value, dict(job.timings))
        after = page[-1].id


@dataclass
class _Finished:
    """What the callers saw of one job: its final record, as the SDK returned it."""

    id: str
    state: str
    acquisition: str
    timings: dict[str, float | None]


@dataclass(frozen=True)
class _Cpu:
    """CPU seconds so far of the broker process, its pods (split into agents, warm
    interpreters and the jobs those fork), and the callers."""

    broker: float
    agents: float
    interpreters: float
    jobs: float
    callers: float

    @property
    def pods(self) -> float:
        return self.agents + self.interpreters + self.jobs

    @classmethod
    def now(cls, broker_pid: int) -> _Cpu:
        pods = _pods_cpu_seconds(broker_pid)
        return cls(
            cpu_seconds(broker_pid),
            pods.agents,
            pods.interpreters,
            pods.jobs,
            _self_cpu_seconds(),
        )

    def minus(self, other: _Cpu) -> _Cpu:
        return _Cpu(
            self.broker - other.broker,
            self.agents - other.agents,
            self.interpreters - other.interpreters,
            self.jobs - other.jobs,
            self.callers - other.callers,
        )


@dataclass
class _Tally:
    finished: list[_Finished] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    submitted: int = 0
    #: HTTP requests the broker served in the window, by method and route template.
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Milliseconds each `/metrics` scrape took in the window (`--scrape-every`).
    scrapes_ms: list[float] = field(default_factory=list)
    #: The broker's render time of each of those scrapes (its `Server-Timing` header).
    renders_ms: list[float] = field(default_factory=list)
    #: ... and the CPU time the broker's thread spent in each render.
    render_cpu_ms: list[float] = field(default_factory=list)
    #: ... and the time that thread was runnable but the OS ran something else (Linux).
    render_runqueue_ms: list[float] = field(default_factory=list)
    #: The broker's own view of its /metrics requests (the handler, without HTTP or queueing):
    #: (count, seconds, count within 5 ms), from its request-latency histogram.
    scrape_server: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: `flood.Phase`s as dicts, with `--flood-phase`.
    flood_phases: list[dict[str, Any]] = field(default_factory=list)


async def _scraper(url: str, every: float, stop_at: float, tally: _Tally) -> None:
    """A Prometheus-like scraper: GET /metrics every `every` seconds until `stop_at`."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=30.0) as http:
        while time.time() < stop_at:
            began = time.perf_counter()
            response = (await http.get("/metrics")).raise_for_status()
            tally.scrapes_ms.append((time.perf_counter() - began) * 1000.0)
            timing = dict(
                part.strip().split(";dur=", 1)
                for part in response.headers.get("server-timing", "").split(",")
                if ";dur=" in part
            )
            if "render" in timing and "cpu" in timing:
                tally.renders_ms.append(float(timing["render"]))
                tally.render_cpu_ms.append(float(timing["cpu"]))
                if "runqueue" in timing:
                    tally.render_runqueue_ms.append(float(timing["runqueue"]))
            await asyncio.sleep(every)


async def _bench_job(client: AsyncClient) -> JobOut:
    """The benchmark's job, submitted and waited for in one request, in the session's tag."""
    return await client.run("cpu", list(COMMAND), lease_tag="bench", wait_timeout=120.0)


async def _caller(url: str, token: str, stop_at: float, tally: _Tally) -> None:
    """One caller: `run` (submit and wait for the terminal state), until `stop_at`."""
    from firepool.client import AsyncClient

    async with AsyncClient(url, token, timeout=60.0) as client:
        while time.time() < stop_at:
            try:
                tally.submitted += 1
                job = await _bench_job(client)
            except Exception as err:  # counted and reported, never hidden
                tally.errors.append(f"{type(err).__name__}: {err}")
                await asyncio.sleep(0.1)
                continue
            tally.finished.append(
                _Finished(
                    id=job.id,
                    state=job.state.value,
                    acquisition=job.pods[0].acquisition.value if job.pods else "",
                    timings=job.timings.model_dump(),
                )
            )


async def _wait_pods_idle(url: str, token: str, pods: int, timeout: float) -> None:
    from firepool.client import AsyncClient

    deadline = time.monotonic() + timeout
    async with AsyncClient(url, token) as client:
        while True:
            idle = [p for p in await client.pods() if p.pool == "cpu" and p.state == "idle"]
            if len(idle) >= pods:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(idle)} of {pods} pods ready after {timeout:.0f}s")
            await asyncio.sleep(0.2)


async def _take_one_pod_each(url: str, tokens: list[str]) -> None:
    """One job per identity, all at once, before the load: each takes a never-used pod, so
    every identity starts with exactly one pod of its own. Left to the load's first
    submissions, both callers of one identity could take a fresh pod each and leave another
    identity none: with floor = ceiling nothing is created for it, and its owner-held
    neighbours always have a queued job (holds are spared then), so it waits out the run."""
    from firepool.client import AsyncClient

    async def first_job(token: str) -> None:
        async with AsyncClient(url, token, timeout=60.0) as client:
            await _bench_job(client)

    await asyncio.gather(*(first_job(token) for token in tokens))


async def _drive(
    url: str,
    tokens: list[str],
    identities: int,
    callers: int,
    pods: int,
    warmup: float,
    seconds: float,
    pid: int,
    scrape_every: float | None = None,
    flood_phase_s: float | None = None,
) -> tuple[_Tally, float, float, _Cpu]:
    """Warm up, then time `seconds`; returns the tally, the window and the broker's CPU in it.
    With `flood_phase_s`, `flood.scrape_in_phases` runs through the window in a process of
    its own and its phases go in `tally.flood_phases`."""
    await _wait_pods_idle(url, tokens[0], pods, timeout=300.0)
    await _take_one_pod_each(url, tokens[: min(identities, pods)])  # tokens[i]: identity i
    tally = _Tally()
    stop_at = time.time() + warmup + seconds
    tasks = [
        asyncio.create_task(_caller(url, tokens[i % len(tokens)], stop_at, tally))
        for i in range(callers)
    ]
    await asyncio.sleep(warmup)
    requests_before = await _requests_by_route(url)
    began = time.time()
    if scrape_every is not None:
        tasks.append(asyncio.create_task(_scraper(url, scrape_every, stop_at, tally)))
    flooder, phases = None, None
    if flood_phase_s is not None:
        context = multiprocessing.get_context("spawn")
        phases = context.Queue()
        flooder = context.Process(
            target=scrape_in_phases,
            args=(url, pid, began + 1.0, flood_phase_s, stop_at, phases),  # 1 s to start
            name="firepool-bench-flood",
        )
        flooder.start()
    before = _Cpu.now(pid)
    await asyncio.sleep(max(0.0, stop_at - time.time()))
    ended = time.time()
    cpu = _Cpu.now(pid).minus(before)
    if flooder is not None and phases is not None:
        tally.flood_phases = await asyncio.to_thread(phases.get, True, 60.0)
        await asyncio.to_thread(flooder.join, 30.0)
    tally.requests = await _requests_by_route(url)
    tally.requests.subtract(requests_before)
    tally.scrape_server = await _scrape_server_side(url)
    await asyncio.gather(*tasks)  # the jobs in flight finish; they fall outside the window
    return tally, began, ended, cpu


_REQUESTS = re.compile(
    r'^firepool_http_requests_total\{method="(?P<method>[^"]*)",route="(?P<route>[^"]*)",'
    r'status="[^"]*"\} (?P<count>\S+)$',
    re.MULTILINE,
)


async def _scrape_server_side(url: str) -> tuple[float, float, float]:
    """(count, total seconds, count within 5 ms) of the broker's /metrics requests so far."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(base_url=url, timeout=30.0) as http:
        text = (await http.get("/metrics")).raise_for_status().text
    count = total = within = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "firepool_http_request_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("route") != "/metrics":
                continue
            if sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_bucket") and sample.labels.get("le") == "0.005":
                within = sample.value
    return count, total, within


async def _requests_by_route(url: str) -> collections.Counter[str]:
    """The broker's HTTP request counters (its /metrics), summed over statuses."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=30.0) as http:
        text = (await http.get("/metrics")).raise_for_status().text
    counts: collections.Counter[str] = collections.Counter()
    for m in _REQUESTS.finditer(text):
        counts[f"{m['method']} {m['route']}"] += int(float(m["count"]))
    return counts


@dataclass(frozen=True)
class _PodsCpu:
    agents: float
    interpreters: float
    jobs: float


#: How a warm interpreter's command line names it (`zygote.start_process`); the processes it
#: forks (spares, jobs) inherit that command line, so only the topmost one is the interpreter.
_INTERPRETER = b"firepool.agent.zygote"


def _pods_cpu_seconds(pid: int) -> _PodsCpu:
    """CPU of every live descendant of `pid` (the pods), by role: the agents (with any
    child they reaped), the warm interpreters' own, and the jobs (what the interpreters
    reaped, plus their live children: spares and running jobs)."""
    parent: dict[int, int] = {}
    own: dict[int, int] = {}
    reaped: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat(int(entry))
        if fields is None:
            continue
        parent[int(entry)] = int(fields[1])
        own[int(entry)] = int(fields[11]) + int(fields[12])  # utime stime
        reaped[int(entry)] = int(fields[13]) + int(fields[14])  # cutime cstime
    children: dict[int, list[int]] = {}
    for child, ppid in parent.items():
        children.setdefault(ppid, []).append(child)
    ticks = {"agents": 0, "interpreters": 0, "jobs": 0}
    stack = [(child, False) for child in children.get(pid, ())]
    while stack:
        p, below_interpreter = stack.pop()
        if below_interpreter:
            ticks["jobs"] += own.get(p, 0) + reaped.get(p, 0)
        elif _INTERPRETER in _cmdline(p):
            ticks["interpreters"] += own.get(p, 0)
            ticks["jobs"] += reaped.get(p, 0)
            below_interpreter = True
        else:
            ticks["agents"] += own.get(p, 0) + reaped.get(p, 0)
        stack.extend((child, below_interpreter) for child in children.get(p, ()))
    tck = CLOCK_TICKS
    return _PodsCpu(ticks["agents"] / tck, ticks["interpreters"] / tck, ticks["jobs"] / tck)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _self_cpu_seconds() -> float:
    """This process's CPU (the callers), its threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def run_once(
    *,
    pods: int,
    callers: int,
    identities: int,
    seconds: float,
    warmup: float,
    store_url: str | None,
    scrape_every: float | None = None,
    flood_phase_s: float | None = None,
) -> dict[str, object]:
    context = multiprocessing.get_context("spawn")
    ready, stop, window, counted = (
        context.Queue(),
        context.Event(),
        context.Queue(),
        context.Queue(),
    )
    names = [f"bench-{i}" for i in range(identities)]
    names = [names[i % identities] for i in range(callers)]  # one token per caller
    load_before = _loadavg()
    with tempfile.TemporaryDirectory(prefix="firepool-bench-") as tmp:
        child = context.Process(
            target=_serve,
            args=(tmp, store_url, pods, names, ready, stop, window, counted),
            name="firepool-bench-broker",
        )
        child.start()
        try:
            url, tokens, pid = ready.get(timeout=120)
            tally, began, ended, cpu = asyncio.run(
                _drive(
                    url,
                    tokens,
                    identities,
                    callers,
                    pods,
                    warmup,
                    seconds,
                    pid,
                    scrape_every,
                    flood_phase_s,
                )
            )
            stop.set()
            window.put({f.id for f in tally.finished})
            stored: dict[str, tuple[str, dict[str, float | None]]] = counted.get(timeout=120)
        finally:
            stop.set()
            child.join(timeout=120)
            if child.is_alive():  # never leave a broker (and its pods) behind
                child.terminate()
                child.join(timeout=30)

    def inside(timings: dict[str, float | None]) -> bool:
        finished = timings.get("finished")
        return finished is not None and began <= finished <= ended

    # The callers' tally and the store's records must agree on the window's jobs.
    in_window = [f for f in tally.finished if inside(f.timings)]
    store_in_window = {job_id for job_id, (_, t) in stored.items() if inside(t)}
    records = [stored[f.id][1] for f in in_window if f.id in stored]
    elapsed = ended - began
    ms = 1000.0

    def span(start: str, end: str) -> list[float]:
        out = []
        for t in records:
            a, b = t.get(start), t.get(end)
            if a is not None and b is not None:
                out.append((b - a) * ms)
        return out

    warm = span("submitted", "first_instruction")
    latency = span("submitted", "finished")
    queued = span("submitted", "assigned")
    handoff = span("assigned", "started")
    pod_to_first = span("assigned", "first_instruction")
    jobs = len(in_window)
    cores = len(os.sched_getaffinity(0))
    return {
        "jobs": jobs,
        "jobs_per_s": jobs / elapsed if elapsed > 0 else float("nan"),
        "window_s": elapsed,
        "scrapes": len(tally.scrapes_ms),
        "scrape_server_ms_mean": 1000 * tally.scrape_server[1] / max(tally.scrape_server[0], 1),
        "scrape_server_within_5ms": tally.scrape_server[2] / max(tally.scrape_server[0], 1),
        "scrape_ms_p50": percentile(tally.scrapes_ms, 50),
        "scrape_ms_p99": percentile(tally.scrapes_ms, 99),
        "scrape_render_ms_p50": percentile(tally.renders_ms, 50),
        "scrape_render_ms_p99": percentile(tally.renders_ms, 99),
        "scrapes_ms": tally.scrapes_ms,
        "renders_ms": tally.renders_ms,
        "render_cpu_ms": tally.render_cpu_ms,
        "render_runqueue_ms": tally.render_runqueue_ms,
        "succeeded": sum(f.state == "SUCCEEDED" for f in in_window),
        "warm_acquisitions": sum(f.acquisition == "warm" for f in in_window),
        "store_jobs_in_window": len(store_in_window),
        "store_agrees": store_in_window == {f.id for f in in_window},
        "errors": len(tally.errors),
        "first_error": tally.errors[0] if tally.errors else "",
        "warm_start_ms_p50": percentile(warm, 50),
        "warm_start_ms_p99": percentile(warm, 99),
        "latency_ms_p50": percentile(latency, 50),
        "latency_ms_p99": percentile(latency, 99),
        "dispatch_ms_p50": percentile(queued, 50),
        "handoff_ms_p50": percentile(handoff, 50),
        "queue_wait_ms_p50": percentile(queued, 50),
        "queue_wait_ms_p99": percentile(queued, 99),
        "pod_to_first_instruction_ms_p50": percentile(pod_to_first, 50),
        "pod_to_first_instruction_ms_p99": percentile(pod_to_first, 99),
        "broker_cpu_s": cpu.broker,
        "broker_cpu_ms_per_job": cpu.broker / jobs * ms if jobs else float("nan"),
        # Where the rest of the machine's CPU went over the window: the pods (agents, warm
        # interpreters and the jobs they forked) and this process (the callers' SDK clients).
        "pods_cpu_ms_per_job": cpu.pods / jobs * ms if jobs else float("nan"),
        "agents_cpu_ms_per_job": cpu.agents / jobs * ms if jobs else float("nan"),
        "interpreters_cpu_ms_per_job": cpu.interpreters / jobs * ms if jobs else float("nan"),
        "jobs_cpu_ms_per_job": cpu.jobs / jobs * ms if jobs else float("nan"),
        "callers_cpu_ms_per_job": cpu.callers / jobs * ms if jobs else float("nan"),
        # The most jobs/s these cores could give if the broker, the agents and the warm
        # interpreters cost nothing: the jobs' own processes (fork, run, exit) and the callers
        # alone take this machine's CPU at that rate.
        "cores": cores,
        "ceiling_jobs_per_s_without_broker_and_pods": (
            cores * ms / ((cpu.jobs + cpu.callers) / jobs * ms)
            if jobs and cpu.jobs + cpu.callers > 0
            else float("nan")
        ),
        # What the broker's API served per job: the callers' submissions (each waiting for
        # its job's end) and polls (a `run` whose submission's wait ran out), and the pods'
        # pushed exit events (none since the broker asks each agent for its attempt's exit).
        "requests_per_job": sum(tally.requests.values()) / jobs if jobs else float("nan"),
        "submissions_per_job": tally.requests["POST /v1/jobs"] / jobs if jobs else float("nan"),
        "polls_per_job": tally.requests["GET /v1/jobs/{job_id}"] / jobs if jobs else float("nan"),
        "exit_events_per_job": (
            tally.requests["POST /internal/v1/events"] / jobs if jobs else float("nan")
        ),
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
        "flood": (
            flood_summary(
                tally.flood_phases,
                [end for t in records if (end := t.get("finished")) is not None],
                settle_s=FLOOD_SETTLE_S,
                rates={"every 0.25 s": 4.0, "every 15 s": 1.0 / 15.0},
            )
            if tally.flood_phases
            else None
        ),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m firepool.bench throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pods", type=int, default=16, help="pods in the cpu pool (floor)")
    parser.add_argument("--callers", type=int, default=32, help="concurrent callers (tokens)")
    parser.add_argument(
        "--identities",
        type=int,
        default=None,
        help="caller identities the tokens belong to (default: min(callers, pods))",
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="timed window")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed seconds first")
    parser.add_argument("--store", default=None, help="database URL (default: SQLite)")
    parser.add_argument(
        "--scrape-every", type=float, default=None, help="GET /metrics every S seconds"
    )
    parser.add_argument(
        "--flood-phase",
        type=float,
        default=None,
        help="alternate S-second phases of back-to-back /metrics scrapes and none (bench.flood)",
    )
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    if args.pods < 1 or args.callers < 1:
        parser.error("--pods and --callers must be >= 1")
    if args.flood_phase is not None and args.flood_phase <= FLOOD_SETTLE_S:
        parser.error(f"--flood-phase must be longer than {FLOOD_SETTLE_S} s")
    identities = args.identities or min(args.callers, args.pods)
    result = run_once(
        pods=args.pods,
        callers=args.callers,
        identities=identities,
        seconds=args.seconds,
        warmup=args.warmup,
        store_url=args.store,
        scrape_every=args.scrape_every,
        flood_phase_s=args.flood_phase,
    )
    result.update(
        pods=args.pods,
        callers=args.callers,
        identities=identities,
        store="sqlite" if args.store is None else args.store.split(":", 1)[0],
        **machine(),
    )
    r: dict[str, Any] = result
    print_table(
        f"throughput: {args.callers} callers ({identities} identities), {args.pods} pods, "
        f"`{' '.join(COMMAND)}`, {r['window_s']:.1f} s, load {r['loadavg_before']:.2f}",
        [
            (
                "jobs/s (submit -> terminal committed)",
                f"{r['jobs_per_s']:.1f}",
                f">= {TARGET_JOBS_PER_S:.0f}",
            ),
            (
                "warm start p50 (ms, submit -> first instruction)",
                f"{r['warm_start_ms_p50']:.1f}",
                "",
            ),
            (
                "warm start p99 (ms)",
                f"{r['warm_start_ms_p99']:.1f}",
                f"<= {TARGET_WARM_P99_MS:.0f}",
            ),
            ("  dispatch p50 (ms, submit -> RUNNING committed)", f"{r['dispatch_ms_p50']:.1f}", ""),
            ("  hand-off p50 (ms, committed -> process started)", f"{r['handoff_ms_p50']:.1f}", ""),
            (
                "  queue wait p99 (ms, submit -> RUNNING; the sibling's job on the pod)",
                f"{r['queue_wait_ms_p99']:.1f}",
                "",
            ),
            (
                "  pod -> first instruction p50 / p99 (ms, committed -> first instruction)",
                f"{r['pod_to_first_instruction_ms_p50']:.1f} / "
                f"{r['pod_to_first_instruction_ms_p99']:.1f}",
                "",
            ),
            ("latency p50 (ms, submit -> terminal)", f"{r['latency_ms_p50']:.1f}", ""),
            ("latency p99 (ms)", f"{r['latency_ms_p99']:.1f}", ""),
            ("broker CPU per job (ms)", f"{r['broker_cpu_ms_per_job']:.2f}", ""),
            (
                "  pods' CPU per job (ms; agents, zygotes, jobs)",
                f"{r['pods_cpu_ms_per_job']:.2f}",
                "",
            ),
            (
                "    agents / warm interpreters / jobs' own processes",
                f"{r['agents_cpu_ms_per_job']:.2f} / {r['interpreters_cpu_ms_per_job']:.2f} / "
                f"{r['jobs_cpu_ms_per_job']:.2f}",
                "",
            ),
            ("  callers' CPU per job (ms; SDK clients)", f"{r['callers_cpu_ms_per_job']:.2f}", ""),
            (
                f"jobs/s if broker, agents, interpreters cost nothing ({r['cores']} cores)",
                f"{r['ceiling_jobs_per_s_without_broker_and_pods']:.0f}",
                "",
            ),
            (
                "jobs (succeeded / warm / in store)",
                f"{r['jobs']} ({r['succeeded']} / {r['warm_acquisitions']} / "
                f"{r['store_jobs_in_window']})",
                "",
            ),
            (
                "API requests per job (submissions / polls / exit events)",
                f"{r['requests_per_job']:.2f} ({r['submissions_per_job']:.2f} / "
                f"{r['polls_per_job']:.2f} / {r['exit_events_per_job']:.2f})",
                "",
            ),
            ("caller errors", str(r["errors"]), "0"),
            *(
                [
                    (
                        "/metrics scrape p50 / p99 (ms, the scraper's wait)",
                        f"{r['scrape_ms_p50']:.2f} / "
                        f"{r['scrape_ms_p99']:.2f} ({r['scrapes']} scrapes)",
                        "",
                    ),
                    (
                        "  in the broker: mean (ms) / share within 5 ms",
                        f"{r['scrape_server_ms_mean']:.2f} / "
                        f"{100 * r['scrape_server_within_5ms']:.0f}%",
                        ">= 99%",
                    ),
                ]
                if r.get("scrapes")
                else []
            ),
            *(_flood_rows(r["flood"]) if r.get("flood") else []),
        ],
    )
    write_json(args.json_path, result)
    return 0 if not r["errors"] and r["jobs"] else 1


def _flood_rows(flood: dict[str, Any]) -> list[tuple[str, str, str]]:
    projected = ", ".join(f"{100 * v:.2f}% {k}" for k, v in flood["projected_loss"].items())
    return [
        (
            "jobs/s in flood / quiet phases (pairs)",
            f"{flood['jobs_per_s_flood']:.1f} / {flood['jobs_per_s_quiet']:.1f} "
            f"({flood['pairs']}; ratio {flood['ratio_pooled']:.3f})",
            "",
        ),
        ("  flood scrapes/s", f"{flood['flood_scrapes_per_s']:.1f}", ""),
        (
            "  CPU per scrape (ms): broker / scraper",
            f"{flood['broker_cpu_ms_per_scrape']:.2f} / {flood['scraper_cpu_ms_per_scrape']:.2f}",
            "",
        ),
        ("  jobs/s lost to scraping, projected", projected, "<= 3%"),
    ]

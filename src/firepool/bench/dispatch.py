"""Durable dispatch commits per second: QUEUED -> RUNNING with pod bindings (paper C.4).

`python -m firepool.bench dispatch --store sqlite|postgresql|mysql --workers 1,64 [--json P]`

Each worker plays a dispatcher: it takes a queued job and commits its start (conditional
UPDATE, attempt row, pod binding) through `JobStore.start`, which returns only once the
transaction is durable. A commit is counted when `start` returns. Jobs are submitted before
the clock starts; each worker count runs on a fresh scratch database, dropped afterwards.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from firepool.bench.common import machine, median, print_table, write_json
from firepool.model import AcquisitionPath, JobSpec, LostRaceError
from firepool.store import JobRecord, PodBinding, SqlJobStore, open_store
from firepool.store.scratch import scratch

#: Process CPU seconds per commit of each run (this process: workers and writer threads).
_CPU: list[float] = []

TARGETS = {"sqlite": 5000.0, "postgresql": 2400.0, "mysql": 500.0}


def _fill(store: SqlJobStore, jobs: int) -> deque[JobRecord]:
    spec = JobSpec(pool="cpu", command=["python", "main.py"])
    with ThreadPoolExecutor(32) as pool:
        made = list(
            pool.map(lambda i: store.submit(f"c{i % 8}", spec, now=time.time()).job, range(jobs))
        )
    return deque(made)


def run_once(store: SqlJobStore, workers: int, jobs: int, seconds: float) -> tuple[int, float]:
    """Start queued jobs from `workers` threads; return (commits, elapsed seconds)."""
    queue = _fill(store, jobs)
    done = [0] * workers
    deadline = time.perf_counter() + seconds

    def work(me: int) -> None:
        while time.perf_counter() < deadline:
            try:
                job = queue.popleft()
            except IndexError:
                return
            binding = PodBinding(0, f"pod-{job.id}", AcquisitionPath.WARM, "same_session")
            try:
                store.start(job, [binding], now=time.time())
            except LostRaceError:
                continue
            done[me] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    began = time.perf_counter()
    cpu = time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    _CPU.append((time.process_time() - cpu) / max(1, sum(done)))
    return sum(done), elapsed


def measure(kind: str, workers: int, args: argparse.Namespace) -> float:
    rates = []
    for _ in range(args.repeats):
        with (
            tempfile.TemporaryDirectory() as tmp,
            scratch(kind, server_url=args.url, data_dir=Path(tmp)) as where,
        ):
            store = open_store(where.url, writers=args.writers, **where.engine_options)
            try:
                commits, elapsed = run_once(store, workers, args.jobs, args.seconds)
            finally:
                store.close()
        rates.append(commits / elapsed)
    return median(rates)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench dispatch", description=__doc__)
    parser.add_argument("--store", choices=sorted(TARGETS), default="sqlite")
    parser.add_argument("--url", help="server URL (default: the local test server)")
    parser.add_argument("--workers", default="1,64", help="comma-separated worker counts")
    parser.add_argument("--jobs", type=int, default=4000, help="queued jobs per run")
    parser.add_argument("--seconds", type=float, default=3.0, help="cap on one run's duration")
    parser.add_argument("--repeats", type=int, default=1, help="runs per worker count (median)")
    parser.add_argument("--writers", type=int, default=None, help="group-commit writer threads")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    target = TARGETS[args.store]
    result: dict[str, object] = {"store": args.store, **machine()}
    rows = []
    for workers in counts:
        rate = measure(args.store, workers, args)
        result[f"commits_per_s_w{workers}"] = round(rate, 1)
        result[f"cpu_us_per_commit_w{workers}"] = round(median(_CPU[-args.repeats :]) * 1e6, 1)
        shown = f">= {target:,.0f}" if workers == max(counts) else ""
        rows.append((f"{args.store} commits/s, {workers} workers", f"{rate:,.0f}", shown))
        cpu_us = result[f"cpu_us_per_commit_w{workers}"]
        rows.append((f"  broker CPU per commit, {workers} workers (us)", f"{cpu_us}", ""))
    result["workers"] = max(counts)
    result["commits_per_s"] = result[f"commits_per_s_w{max(counts)}"]
    print_table("durable dispatch (QUEUED -> RUNNING + pod binding)", rows)
    write_json(args.json_path, result)
    return 0

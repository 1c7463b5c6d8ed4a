"""`python -m firepool.bench tracker`: the control plane's hot path, with no store and no I/O.

Measures, at 100,000 tracked pods: claims per second with one claimer and with 32 claimer
threads (the tracker has no lock of its own, since the broker core is single-threaded, so the
threads serialise their calls through one lock of the benchmark's), how long a claim holds that
lock (p50/p99), memory per tracked pod
(tracemalloc) and one reconcile pass. Claims are timed in batches around the `claim` call
itself with requests built beforehand; releases between batches are not timed. The paper's Go
tracker reached 191-219k claims/s with one claimer on a 64-vCPU host.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import threading
import time
import tracemalloc
from types import TracebackType

from firepool.bench.common import machine, percentile, print_table, write_json
from firepool.control.records import ClaimRequest, Lease
from firepool.control.scaler import QueuedDemand, plan
from firepool.control.tracker import Tracker
from firepool.model import PoolSpec

POOL = "bench"


class TimedLock:
    """A lock that records, in ns, how long each holder kept it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._t0 = 0
        self.samples: list[int] = []

    def __enter__(self) -> TimedLock:
        self._lock.acquire()
        self._t0 = time.perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.samples.append(time.perf_counter_ns() - self._t0)
        self._lock.release()


def build(pods: int) -> Tracker:
    spec = PoolSpec(name=POOL, max_count=pods, idle_timeout=3600.0, step=pods)
    tracker = Tracker([spec])
    for i in range(pods):
        name = f"{POOL}-pod-{i:06d}"
        tracker.add_pod(name, POOL, 0.0)
        tracker.pod_ready(name, 1.0)
    return tracker


def requests(count: int, round_no: int, callers: int = 1000) -> list[ClaimRequest]:
    return [
        ClaimRequest(f"job-{round_no}-{i}", f"caller-{i % callers}", POOL, tag="s", queued_at=2.0)
        for i in range(count)
    ]


def claim_round(tracker: Tracker, reqs: list[ClaimRequest], now: float) -> float:
    """Claim every request once; return the seconds spent inside `claim` calls."""
    claim = tracker.claim
    start = time.perf_counter()
    for req in reqs:
        claim(req, now)
    return time.perf_counter() - start


def locked_round(tracker: Tracker, reqs: list[ClaimRequest], now: float, lock: TimedLock) -> None:
    """Claim every request once, each call under `lock` (which times how long it is held)."""
    claim = tracker.claim
    for req in reqs:
        with lock:
            claim(req, now)


def release_all(tracker: Tracker, reqs: list[ClaimRequest], now: float) -> None:
    for req in reqs:
        if tracker.job_pods(req.job):
            tracker.release(req.job, now)


def claims_one(tracker: Tracker, batch: int, rounds: int) -> list[float]:
    rates: list[float] = []
    for r in range(rounds):
        reqs = requests(batch, r)
        now = 10.0 + r
        elapsed = claim_round(tracker, reqs, now)
        rates.append(batch / elapsed)
        release_all(tracker, reqs, now + 0.5)
    return rates


def claims_threaded(tracker: Tracker, threads: int, per_thread: int, round_no: int) -> float:
    reqs = requests(threads * per_thread, 1000 + round_no)
    chunks = [reqs[i::threads] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)
    lock = threading.Lock()  # the tracker is not thread-safe: the claimers take turns
    now = 5000.0 + round_no

    def worker(chunk: list[ClaimRequest]) -> None:
        barrier.wait()
        claim = tracker.claim
        for req in chunk:
            with lock:
                claim(req, now)

    workers = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    for w in workers:
        w.start()
    start = time.perf_counter()
    barrier.wait()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    release_all(tracker, reqs, now + 0.5)
    return len(reqs) / elapsed


def bytes_per_pod(pods: int) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracker = build(pods)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(tracker) == pods
    return (after - before) / pods


def reconcile_ms(tracker: Tracker, runs: int) -> list[float]:
    """A reconcile pass over a pool with a mix of held, busy and idle pods."""
    spec = tracker.pool_spec(POOL)
    reqs = requests(len(tracker) // 2, 9999)
    now = 20000.0
    for req in reqs:
        lease = tracker.claim(req, now)
        if isinstance(lease, Lease):
            tracker.mark_running(lease.pods[0].name)
    queued = [QueuedDemand(f"caller-{i % 1000}") for i in range(1000)]
    times: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        pods = tracker.pool_pods(POOL)
        plan(spec, pods, (), queued, now + 100.0, headroom_units=None)
        times.append((time.perf_counter() - start) * 1000.0)
    release_all(tracker, reqs, now + 1.0)
    return times


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench tracker")
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=50_000, help="claims per timed round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    batch = min(args.batch, args.pods)

    tracker = build(args.pods)
    gc.collect()
    gc.freeze()  # long-lived index records: keep the cyclic GC from rescanning them
    rates_1 = claims_one(tracker, batch, args.rounds)
    rates_32 = [
        claims_threaded(tracker, args.threads, batch // args.threads, r) for r in range(args.rounds)
    ]
    recon = reconcile_ms(tracker, args.rounds)
    del tracker
    gc.unfreeze()
    gc.collect()

    lock = TimedLock()
    timed = build(args.pods)
    gc.collect()
    gc.freeze()
    claim_holds: list[float] = []
    for r in range(2):
        reqs = requests(batch, 500 + r)
        lock.samples.clear()
        locked_round(timed, reqs, 30000.0 + r, lock)
        claim_holds.extend(s / 1000.0 for s in lock.samples)
        release_all(timed, reqs, 30000.5 + r)
    del timed
    # The instrument's own cost, measured the same way around an empty critical section.
    empty = TimedLock()
    for _ in range(100_000):
        with empty:
            pass
    overhead = [s / 1000.0 for s in empty.samples]
    gc.unfreeze()
    gc.collect()

    per_pod = bytes_per_pod(args.pods)
    result: dict[str, object] = {
        "pods": args.pods,
        "claims_per_s_1": statistics.median(rates_1),
        "claims_per_s_32": statistics.median(rates_32),
        "lock_hold_us_p50": percentile(claim_holds, 50),
        "lock_hold_us_p99": percentile(claim_holds, 99),
        "lock_timer_overhead_us_p50": percentile(overhead, 50),
        "bytes_per_pod": per_pod,
        "reconcile_ms_100k": statistics.median(recon),
        "claims_per_s_1_runs": rates_1,
        "claims_per_s_32_runs": rates_32,
        "reconcile_ms_runs": recon,
        "machine": machine(),
    }
    print_table(
        f"tracker, {args.pods:,} pods (median of {args.rounds} rounds)",
        [
            ("claims/s, 1 claimer", f"{result['claims_per_s_1']:,.0f}", ">= 250,000"),
            (f"claims/s, {args.threads} claimers", f"{result['claims_per_s_32']:,.0f}", "-"),
            ("lock hold p50 (µs)", f"{result['lock_hold_us_p50']:.2f}", "<= 2"),
            ("lock hold p99 (µs)", f"{result['lock_hold_us_p99']:.2f}", "<= 8"),
            (
                "  of which the timer itself, p50 (µs)",
                f"{result['lock_timer_overhead_us_p50']:.2f}",
                "-",
            ),
            ("bytes per tracked pod", f"{per_pod:,.0f}", "<= 1024"),
            ("reconcile pass (ms)", f"{result['reconcile_ms_100k']:.1f}", "<= 500"),
        ],
    )
    write_json(args.json_path, result)
    return 0

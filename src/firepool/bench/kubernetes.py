"""`python -m firepool.bench kubernetes [--kubeconfig PATH]`: the Kubernetes backend and the
broker core at scale.

Against a real API server with kwok's simulated nodes (default 1,000 nodes, 10,000 pods). With
no `--kubeconfig` the bench starts its own control plane (`firepool.testing.control_plane`)
and stops it at the end, which also removes everything the run made; with one, it makes its
own nodes and namespace there and deletes them afterwards (`--keep` leaves them). This process
plays the broker: the backend, a broker core and a SQLite store, with the garbage collector
and the event loop set up as `firepool serve` sets them up. It measures:

- create -> Running: from the moment a pod's create is sent (after pacing) until the
  backend's watch sees it ready, p50/p90 (the scheduler and kwok are in this path).
- watch lag: an annotation is patched onto a running pod and the time until the backend's
  cache holds the version carrying it is measured, p50/p99 over `--lag-samples` patches spread
  over the creates (target p99 <= 1 s). The patch goes through an admin client of the bench's
  own, timed from when it is sent: through the backend it would wait in the token bucket
  behind the run's queued creates, which is pacing, not lag. The figure is an upper bound of
  event -> cache, as it also holds the patch's own commit on the server.
- claim latency and rate: the pods are registered with a real broker core from the backend's
  records, as a restarted broker's recovery registers them (`control/recovery.py`'s plan);
  jobs stored QUEUED in a real SQLite store are handed to the core and each claim runs the
  service's path: the dispatch pass claims a warm pod, the QUEUED -> RUNNING commit is made
  durable by the service's own `AttemptRunner.commit`, and `committed` marks the pod running.
  Latency is from handing the job to the core until then, with jobs offered at `--claim-rate`
  (p50 target <= 5 ms); the rate is measured with `--claimers` concurrent submitters, each
  handing over its next job when its last is claimed (target >= 1,000 claims/s). Nothing is
  launched (kwok pods run no agent) and no claimed pod is released, so every claim finds a
  never-used warm pod among the remaining ones.
- memory: the process's RSS with every pod cached (target <= 1 GiB), and during a forced
  relist (the watcher's own `list_all` and list handler, as after a 410) the highest RSS a
  thread samples every 2 ms (target <= 1.5 GiB; VmHWM cannot be reset, so it is reported too
  but is only the relist's peak when it exceeds every earlier one).
- the longest GIL hold during the relist (target <= 200 ms): see `GapWatchdog`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import math
import secrets
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firepool.backends.base import PodCreate, PodRecord
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.cache import Change
from firepool.backends.kubernetes.rest import Rest
from firepool.backends.kubernetes.status import Phase
from firepool.bench.common import machine, percentile, print_table, write_json
from firepool.control import pod_annotations
from firepool.control.actions import Action, Dispatch, LaunchAttempt, Reconcile, StartAttempt
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore, CoreConfig
from firepool.control.recovery import ListedPod, plan_recovery
from firepool.model import FirepoolError, JobSpec, PoolSpec
from firepool.service.attempt import AttemptRunner, Running
from firepool.service.broker import BrokerConfig
from firepool.service.pods import PodManager
from firepool.service.tickets import ticket_of
from firepool.service.tuning import run_serving, tune_gc_for_serving
from firepool.store import JobRecord, SqlJobStore, open_store
from firepool.store.logs import RankLogStorage
from firepool.testing.kwok import (
    delete_namespace,
    delete_node,
    ensure_namespace,
    ensure_node,
    ensure_service_account,
    kwok_node,
    rest_for,
)

POOL = PoolSpec(name="bench", cpus_per_pod=0.1, memory_mib_per_pod=64, max_count=1_000_000)
#: What the service writes on a pod once it is ready (`service/broker.py`, `_create`), written
#: here at create: the same trust for recovery, without 10,000 more paced patches.
IDLE = {k: v for k, v in pod_annotations.idle().items() if v is not None}
#: Writes per pod create, each paced: its Secret and the pod.
WRITES_PER_POD = 2
RSS_SAMPLE_S = 0.002
WATCHDOG_SLEEP_S = 0.001
QUIET_WINDOW_S = 1.0


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench kubernetes")
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="a cluster with kwok (cluster-admin); default: start our own",
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--qps", type=float, default=100.0, help="paced writes per second")
    parser.add_argument("--lag-samples", type=int, default=500)
    parser.add_argument(
        "--latency-claims",
        type=int,
        default=None,
        help="claims of the latency measurement (default: pods / 5, <= 2000)",
    )
    parser.add_argument(
        "--claim-rate",
        type=float,
        default=500.0,
        help="claims offered per second while latency is measured",
    )
    parser.add_argument(
        "--burst-claims",
        type=int,
        default=None,
        help="claims of the rate measurement (default: pods / 2, <= 5000)",
    )
    parser.add_argument("--claimers", type=int, default=64)
    parser.add_argument("--callers", type=int, default=1000)
    parser.add_argument(
        "--list-page", type=int, default=None, help="pods per list page (default: the backend's)"
    )
    parser.add_argument("--namespace", default=None, help="default: a fresh fp-bench-<hex>")
    parser.add_argument("--keep", action="store_true", help="leave nodes, pods and namespace")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(list(argv))
    if args.latency_claims is None:
        args.latency_claims = min(2000, args.pods // 5)
    if args.burst_claims is None:
        args.burst_claims = min(5000, args.pods // 2)
    if args.latency_claims + args.burst_claims > args.pods:
        parser.error("--latency-claims + --burst-claims must not exceed --pods (no release)")
    if min(args.latency_claims, args.burst_claims) < 0 or min(args.claimers, args.callers) < 1:
        parser.error("claims must be >= 0, claimers and callers >= 1")
    return args


# ---------------------------------------------------------------------- process measurements


def proc_status_mib(field: str) -> float:
    """A `kB` line of /proc/self/status (VmRSS, VmHWM) in MiB; NaN off Linux."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return math.nan
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    return math.nan


class RssSampler(threading.Thread):
    """The highest VmRSS seen while it runs: VmHWM holds the process's peak since it started,
    and cannot be reset before the relist."""

    def __init__(self, every_s: float = RSS_SAMPLE_S) -> None:
        super().__init__(name="bench-rss", daemon=True)
        self.every_s = every_s
        self.peak_mib = 0.0
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak_mib = max(self.peak_mib, proc_status_mib("VmRSS"))
            self.samples += 1
            self._halt.wait(self.every_s)

    def stop(self) -> None:
        self._halt.set()
        self.join()


class GapWatchdog(threading.Thread):
    """The longest gap between the wake-ups of a thread that sleeps 1 ms in a loop.

    A sleeping thread needs the GIL back to note that it woke. Once it has waited for it
    longer than the switch interval (5 ms) it asks the holder to drop it, which Python code
    does at its next bytecode boundary but a long C call (`json.loads` of a list page, a full
    garbage collection) only when it returns. So the longest gap bounds from above the longest
    time any one thread kept the GIL: it also holds the 1 ms sleep, up to one switch interval,
    and any time the OS gave this thread no core (the same watchdog over a quiet second before
    the relist shows that floor)."""

    def __init__(self, sleep_s: float = WATCHDOG_SLEEP_S) -> None:
        super().__init__(name="bench-gil-watchdog", daemon=True)
        self.sleep_s = sleep_s
        self.longest_s = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        last = time.perf_counter()
        while not self._halt.is_set():
            time.sleep(self.sleep_s)
            now = time.perf_counter()
            self.longest_s = max(self.longest_s, now - last)
            last = now

    def stop(self) -> None:
        self._halt.set()
        self.join()


class GcPauses:
    """The longest garbage collection while registered, and how many ran: of the GIL holds
    the watchdog sees, the ones the collector makes (it walks every tracked object of the
    generations it collects in one go)."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.count = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.count += 1
        self.longest_s = max(self.longest_s, time.perf_counter() - self._started)


@contextlib.contextmanager
def probes() -> Iterator[tuple[RssSampler, GapWatchdog, GcPauses]]:
    sampler, watchdog, pauses = RssSampler(), GapWatchdog(), GcPauses()
    sampler.start()
    watchdog.start()
    gc.callbacks.append(pauses)
    try:
        yield sampler, watchdog, pauses
    finally:
        gc.callbacks.remove(pauses)
        watchdog.stop()
        sampler.stop()


def quiet_gap_s() -> float:
    """The watchdog's longest gap over a quiet second: its floor on this machine."""
    watchdog = GapWatchdog()
    watchdog.start()
    time.sleep(QUIET_WINDOW_S)
    watchdog.stop()
    return watchdog.longest_s


# ---------------------------------------------------------------------- the cluster


@contextlib.contextmanager
def cluster(kubeconfig: str | None) -> Iterator[tuple[str, bool]]:
    """The admin kubeconfig, and whether the run owns the cluster (then stopping it cleans
    up everything at once, with no deletes through the API)."""
    if kubeconfig is not None:
        yield kubeconfig, False
        return
    from firepool.testing.control_plane import ControlPlane, build_binaries

    with ControlPlane(build_binaries()) as plane:
        yield str(plane.kubeconfig), True


def node_names(count: int) -> list[str]:
    return [f"fp-bench-node-{i}" for i in range(count)]


async def make_nodes(admin: Rest, count: int) -> float:
    started = time.monotonic()
    await asyncio.gather(
        *(asyncio.to_thread(ensure_node, admin, kwok_node(n)) for n in node_names(count))
    )
    return time.monotonic() - started


async def tear_down(admin: Rest, args: argparse.Namespace, namespace: str) -> None:
    """What the run made on a cluster it does not own: its namespace (the server deletes the
    pods and Secrets in it) and its nodes. A namespace the caller named stays; the backend's
    pods in it were deleted before."""
    if args.namespace is None:
        await asyncio.to_thread(delete_namespace, admin, namespace)
    await asyncio.gather(
        *(asyncio.to_thread(delete_node, admin, n) for n in node_names(args.nodes))
    )


# ---------------------------------------------------------------------- creates and watch lag


@dataclass
class Mark:
    token: str
    sent: float = math.nan  # time.monotonic(), the cache's clock, when the patch went out


class PodWatch:
    """The backend's change hook: when each pod was first seen ready, and each lag patch's
    delay until the cache held it."""

    def __init__(self, backend: KubernetesBackend, pods: int) -> None:
        self.backend = backend
        self.pods = pods
        self.issued: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.marks: dict[str, Mark] = {}
        self.lags: list[float] = []
        self.all_running = asyncio.Event()
        self.key = backend.codec.encode_key("lag")
        backend.on_change = self.changed
        backend.on_issue = self.issue

    def issue(self, name: str) -> None:
        self.issued[name] = time.monotonic()  # after pacing: the limiter's queue is not lag

    def changed(self, change: Change) -> None:
        if change.observed.phase is Phase.READY and change.name not in self.running:
            self.running[change.name] = change.at
            if len(self.running) >= self.pods:
                self.all_running.set()
        mark = self.marks.get(change.name)
        if mark is None:
            return
        pod = self.backend.cache.pods.get(change.name) or {}
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(self.key) == mark.token:
            self.lags.append(change.at - mark.sent)
            del self.marks[change.name]

    def create_to_running(self) -> list[float]:
        return [at - self.issued[n] for n, at in self.running.items() if n in self.issued]


def send_lag_patch(admin: Rest, namespace: str, name: str, key: str, mark: Mark) -> None:
    body = {"metadata": {"annotations": {key: mark.token}}}
    mark.sent = time.monotonic()
    admin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        "annotate pod",
        body=body,
        content_type="application/merge-patch+json",
    )


async def sample_lag(
    watch: PodWatch, admin: Rest, namespace: str, samples: int, period_s: float
) -> None:
    """Patch running pods now and then, during and after the creates."""
    taken = 0
    while taken < samples:
        candidates = [n for n in watch.running if n not in watch.marks]
        if candidates:
            name = candidates[(taken * 7919) % len(candidates)]
            mark = watch.marks[name] = Mark(f"{taken}-{secrets.token_hex(4)}")
            await asyncio.to_thread(send_lag_patch, admin, namespace, name, watch.key, mark)
            taken += 1
        await asyncio.sleep(period_s)


async def create_pods(
    backend: KubernetesBackend,
    watch: PodWatch,
    admin: Rest,
    args: argparse.Namespace,
    namespace: str,
) -> dict[str, Any]:
    started = time.monotonic()
    creating = asyncio.gather(
        *(
            backend.create(PodCreate(pool=POOL, name=f"bench-{i}", annotations=IDLE))
            for i in range(args.pods)
        )
    )
    period = max(0.01, args.pods * WRITES_PER_POD / args.qps / max(1, args.lag_samples))
    lagging = asyncio.create_task(sample_lag(watch, admin, namespace, args.lag_samples, period))
    await asyncio.wait_for(creating, args.timeout)
    create_s = time.monotonic() - started
    await asyncio.wait_for(watch.all_running.wait(), args.timeout)
    running_s = time.monotonic() - started
    await asyncio.wait_for(lagging, args.timeout)
    deadline = time.monotonic() + 30
    while watch.marks and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    to_running = watch.create_to_running()
    return {
        "create_s": round(create_s, 2),
        "all_running_s": round(running_s, 2),
        "create_to_running_p50_s": percentile(to_running, 50),
        "create_to_running_p90_s": percentile(to_running, 90),
        "watch_lag_p50_s": percentile(watch.lags, 50),
        "watch_lag_p99_s": percentile(watch.lags, 99),
        "watch_lag_samples": len(watch.lags),
        "watch_lag_missing": len(watch.marks),
    }


# ---------------------------------------------------------------------- the broker core


def broker_core() -> BrokerCore:
    """The core as the service builds it (`Broker.__init__`, with BrokerConfig's defaults)."""
    config = BrokerConfig()
    names = iter(range(sys.maxsize))
    return BrokerCore(
        [POOL],
        BudgetLedger(),
        new_name=lambda pool: f"{pool}-new-{next(names)}",
        config=CoreConfig(
            scaler=config.scaler,
            max_gpus_per_caller=config.max_gpus_per_caller,
            elastic=config.elastic.rules(),
            gang_reservations=config.gang_reservations,
        ),
        start=time.time(),
    )


def listed(records: Iterable[PodRecord]) -> list[ListedPod]:
    """The backend's records as recovery reads them (`service/recovery.py`, `recover`)."""
    return [
        ListedPod(
            name=r.name,
            pool=r.pool,
            role=r.role,
            created_at=r.created_at,
            template=r.template_version,
            annotations=r.annotations,
            alive=r.alive,
        )
        for r in records
    ]


async def register(backend: KubernetesBackend, core: BrokerCore) -> tuple[int, float]:
    """Every pod the backend lists, into the core through recovery's plan; (count, seconds)."""
    started = time.perf_counter()
    plan = plan_recovery(listed(await backend.list_pods()), [], core.specs)
    for snap in plan.restore:
        core.restore_pod(snap)
    return len(plan.restore), time.perf_counter() - started


class ClaimDriver:
    """The service's executor (`service/broker.py`) for the actions a claim produces, and
    only those: a `Dispatch` wakes the dispatch loop, a `StartAttempt` commits through the
    service's own `AttemptRunner.commit` and reports `committed` (or `commit_lost`), and the
    `LaunchAttempt` that follows is where the pod is marked running, so the claim ends. Every
    decision is the core's; no agent is called."""

    def __init__(self, core: BrokerCore, runner: AttemptRunner) -> None:
        self.core = core
        self.runner = runner
        self.wake = asyncio.Event()
        self.records: dict[str, JobRecord] = {}
        self.claimed: dict[str, asyncio.Future[float]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.dispatch_s = 0.0

    def submit(self, job: JobRecord) -> asyncio.Future[float]:
        """Hand a stored QUEUED job to the core; resolves to the perf_counter of its claim."""
        claimed: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.claimed[job.id] = claimed
        self.records[job.id] = job
        self.act(self.core.submit(ticket_of(job), time.time()))
        return claimed

    def act(self, actions: Iterable[Action]) -> None:
        for action in actions:
            if isinstance(action, Dispatch):
                self.wake.set()
            elif isinstance(action, StartAttempt):
                task = asyncio.create_task(self.commit(action))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            elif isinstance(action, LaunchAttempt):
                self.claimed.pop(action.job).set_result(time.perf_counter())
            elif isinstance(action, Reconcile):
                self.fail_all(f"pool {action.pool} has no warm pod left for a claim")

    def fail_all(self, why: str) -> None:
        for claimed in self.claimed.values():
            if not claimed.done():
                claimed.set_exception(RuntimeError(why))

    async def dispatch_loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            started = time.perf_counter()
            actions = self.core.dispatch(time.time())
            self.dispatch_s += time.perf_counter() - started
            self.act(actions)

    async def commit(self, action: StartAttempt) -> None:
        job_id = action.ticket.job
        running = Running(self.records.pop(job_id), action.lease, ticket=action.ticket)
        try:
            started = await self.runner.commit(running)
        except Exception as exc:
            self.claimed.pop(job_id).set_exception(exc)
            return
        if started is None:
            self.act(self.core.commit_lost(job_id, time.time()))
            self.claimed.pop(job_id).set_exception(RuntimeError(f"{job_id}: commit lost"))
            return
        self.act(self.core.committed(job_id, time.time()))


async def store_jobs(store: SqlJobStore, count: int, callers: int, tag: str) -> list[JobRecord]:
    spec = JobSpec(pool=POOL.name, command=["true"], lease_tag=tag)
    submitted = await asyncio.gather(
        *(store.submit_async(f"caller-{i % callers}", spec, now=time.time()) for i in range(count))
    )
    return [s.job for s in submitted]


async def offered(driver: ClaimDriver, jobs: Sequence[JobRecord], rate: float) -> list[float]:
    """Open loop: job i is handed over at i / rate, whether or not earlier ones are claimed."""
    started = time.perf_counter()
    pending: list[tuple[float, asyncio.Future[float]]] = []
    for i, job in enumerate(jobs):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        pending.append((time.perf_counter(), driver.submit(job)))
    return [await claimed - t0 for t0, claimed in pending]


async def closed(
    driver: ClaimDriver, jobs: Sequence[JobRecord], claimers: int
) -> tuple[list[float], float]:
    """`claimers` submitters, each handing over its next job once its last is claimed;
    (latencies, seconds for all of them)."""
    todo = deque(jobs)
    latencies: list[float] = []

    async def claimer() -> None:
        while todo:
            t0 = time.perf_counter()
            latencies.append(await driver.submit(todo.popleft()) - t0)

    started = time.perf_counter()
    await asyncio.gather(*(claimer() for _ in range(claimers)))
    return latencies, time.perf_counter() - started


async def measure_claims(
    backend: KubernetesBackend, args: argparse.Namespace, data_dir: Path
) -> dict[str, Any]:
    core = broker_core()
    known, register_s = await register(backend, core)
    store = open_store(data_dir=data_dir)
    runner = AttemptRunner(
        store=store,
        pods=PodManager(backend, callback_url=lambda: None),
        logs=RankLogStorage(data_dir / "logs"),
        clock=time.time,
        package_url=lambda digest: "",
    )
    driver = ClaimDriver(core, runner)
    looping = asyncio.create_task(driver.dispatch_loop())
    try:
        return {
            "pods_known_to_core": known,
            "register_s": round(register_s, 3),
            **await claim_phases(driver, store, args),
        }
    finally:
        looping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await looping
        store.close()


async def claim_phases(
    driver: ClaimDriver, store: SqlJobStore, args: argparse.Namespace
) -> dict[str, Any]:
    first = await store_jobs(store, args.latency_claims, args.callers, "latency")
    latencies = await asyncio.wait_for(offered(driver, first, args.claim_rate), args.timeout)
    second = await store_jobs(store, args.burst_claims, args.callers, "rate")
    dispatch_before, cpu_before = driver.dispatch_s, time.process_time()
    loaded, elapsed = await asyncio.wait_for(closed(driver, second, args.claimers), args.timeout)
    per_claim = 1e6 / len(second) if second else math.nan
    return {
        "claim_latency_p50_ms": percentile(latencies, 50) * 1000,
        "claim_latency_p99_ms": percentile(latencies, 99) * 1000,
        "claims_per_s": len(second) / elapsed if second else math.nan,
        "claim_latency_loaded_p50_ms": percentile(loaded, 50) * 1000,
        "claim_latency_loaded_p99_ms": percentile(loaded, 99) * 1000,
        "core_dispatch_us_per_claim": (driver.dispatch_s - dispatch_before) * per_claim,
        "cpu_us_per_claim": (time.process_time() - cpu_before) * per_claim,
    }


# ---------------------------------------------------------------------- relist


async def handed_over(
    backend: KubernetesBackend, items: list[dict[str, Any]], version: str
) -> None:
    """The watch thread's own hand-over of a list (onto the loop, to the cache), awaited:
    the loop runs callbacks in order, so `done` resolves after the list handler ran."""
    watcher = backend._watcher
    assert watcher is not None
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    watcher.on_list(items, version)
    loop.call_soon_threadsafe(done.set_result, None)
    await done


async def measure_relist(backend: KubernetesBackend) -> dict[str, Any]:
    """A relist as the watcher makes one after a 410 (a full `list_all`, then the list
    handler replacing the cache), with RSS sampled and the GIL watched throughout."""
    watcher = backend._watcher  # the backend has no public relist; the watch tests do this too
    assert watcher is not None
    quiet = await asyncio.to_thread(quiet_gap_s)
    before = proc_status_mib("VmRSS")
    with probes() as (sampler, watchdog, pauses):
        started = time.perf_counter()
        items, version = await asyncio.to_thread(watcher.list_all)
        listed_s = time.perf_counter() - started
        await handed_over(backend, items, version)
        relist_s = time.perf_counter() - started
    count = len(items)
    del items
    return {
        "rss_cached_mib": round(before, 1),
        "rss_relist_peak_mib": round(max(sampler.peak_mib, before), 1),
        "rss_after_relist_mib": round(proc_status_mib("VmRSS"), 1),
        "vmhwm_after_relist_mib": round(proc_status_mib("VmHWM"), 1),
        "rss_samples": sampler.samples,
        "relist_pods": count,
        "relist_list_s": round(listed_s, 3),
        "relist_s": round(relist_s, 3),
        "gil_hold_max_ms": watchdog.longest_s * 1000,
        "gil_gap_quiet_ms": quiet * 1000,
        "gc_pause_max_ms": pauses.longest_s * 1000,
        "gc_collections": pauses.count,
    }


# ---------------------------------------------------------------------- the run


def backend_for(kubeconfig: str, namespace: str, args: argparse.Namespace) -> KubernetesBackend:
    settings = KubernetesSettings(
        namespace=namespace,
        kubeconfig=kubeconfig,
        instance="bench",
        agent_health=False,
        qps=args.qps,
        burst=max(1, int(args.qps)),
        delete_grace_s=0,
        api_threads=32,
        **({"list_page": args.list_page} if args.list_page else {}),
    )
    return KubernetesBackend(settings)


async def on_cluster(kubeconfig: str, owned: bool, args: argparse.Namespace) -> dict[str, Any]:
    admin = rest_for(kubeconfig)
    namespace = args.namespace or f"fp-bench-{secrets.token_hex(3)}"
    made = False
    try:
        nodes_s = await make_nodes(admin, args.nodes)
        made = True
        await asyncio.to_thread(ensure_namespace, admin, namespace)
        await asyncio.to_thread(ensure_service_account, admin, namespace)
        result = await with_backend(kubeconfig, admin, namespace, owned, args)
        return {"namespace": namespace, "nodes_setup_s": round(nodes_s, 2), **result}
    finally:
        if made and not (owned or args.keep):
            await tear_down(admin, args, namespace)
        admin.close()


async def with_backend(
    kubeconfig: str, admin: Rest, namespace: str, owned: bool, args: argparse.Namespace
) -> dict[str, Any]:
    backend = backend_for(kubeconfig, namespace, args)
    watch = PodWatch(backend, args.pods)
    try:
        await backend.start()
        created = await create_pods(backend, watch, admin, args, namespace)
        with tempfile.TemporaryDirectory(prefix="fp-bench-k8s-") as tmp:
            claims = await measure_claims(backend, args, Path(tmp))
        relist = await measure_relist(backend)
        cached = len(backend.cache.pods)
        if not (owned or args.keep) and args.namespace is not None:
            await backend.delete_all()  # a namespace we did not make stays, without our pods
        return {**created, **claims, **relist, "cached_pods": cached}
    finally:
        await backend.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    with cluster(args.kubeconfig) as (kubeconfig, owned):
        result = await on_cluster(kubeconfig, owned, args)
    return {
        "nodes": args.nodes,
        "pods": args.pods,
        "qps": args.qps,
        "own_control_plane": args.kubeconfig is None,
        "latency_claims": args.latency_claims,
        "claim_rate": args.claim_rate,
        "burst_claims": args.burst_claims,
        "claimers": args.claimers,
        "list_page": args.list_page,
        **result,
        "run_s": round(time.monotonic() - started, 1),
        "machine": machine(),
    }


@contextlib.contextmanager
def serving_gc() -> Iterator[None]:
    """The collector as `firepool serve` tunes it, restored afterwards (a test may call
    `main` in its own process)."""
    threshold = gc.get_threshold()
    tune_gc_for_serving()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        ("create -> Running p50", f"{r['create_to_running_p50_s']:.3f} s", ""),
        ("create -> Running p90", f"{r['create_to_running_p90_s']:.3f} s", ""),
        (
            f"claim latency p50 ({r['claim_rate']:.0f}/s offered)",
            f"{r['claim_latency_p50_ms']:.2f} ms",
            "<= 5 ms",
        ),
        ("claim latency p99", f"{r['claim_latency_p99_ms']:.2f} ms", ""),
        (f"claims/s ({r['claimers']} claimers)", f"{r['claims_per_s']:,.0f}", ">= 1,000"),
        ("  claim latency p50 at that rate", f"{r['claim_latency_loaded_p50_ms']:.1f} ms", ""),
        ("  core dispatch per claim", f"{r['core_dispatch_us_per_claim']:.0f} µs", ""),
        ("  process CPU per claim", f"{r['cpu_us_per_claim']:.0f} µs", ""),
        ("watch lag p50", f"{r['watch_lag_p50_s'] * 1000:.1f} ms", ""),
        ("watch lag p99", f"{r['watch_lag_p99_s'] * 1000:.1f} ms", "<= 1000 ms"),
        ("RSS, all pods cached", f"{r['rss_cached_mib']:.0f} MiB", "<= 1024 MiB"),
        ("RSS peak during a relist", f"{r['rss_relist_peak_mib']:.0f} MiB", "<= 1536 MiB"),
        ("longest GIL hold, relist", f"{r['gil_hold_max_ms']:.1f} ms", "<= 200 ms"),
        ("  watchdog gap, quiet second", f"{r['gil_gap_quiet_ms']:.1f} ms", ""),
        ("  longest collection, relist", f"{r['gc_pause_max_ms']:.1f} ms", ""),
        ("relist (list + cache replace)", f"{r['relist_s']:.2f} s", ""),
        ("all running after", f"{r['all_running_s']:.1f} s", ""),
    ]


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    try:
        with serving_gc():
            result = run_serving(run(args))
    except FirepoolError as err:
        print(f"kubernetes benchmark: {err.code.value}: {err.message}", file=sys.stderr)
        return 2
    print_table(
        f"Kubernetes backend: {result['pods']} pods on {result['nodes']} kwok nodes", rows(result)
    )
    write_json(args.json, result)
    return 0

"""`python -m firepool.bench kubernetes --kubeconfig PATH`: the Kubernetes backend at scale.

Against a real API server with kwok's simulated nodes (default 1,000 nodes, 10,000 pods), it
measures what the backend itself adds:

- create -> Running: from the moment a pod's create is issued (after pacing) until the
  backend's watch sees it ready, p50/p90 (the scheduler and kwok are in this path; the target
  is what the paper's cluster shows, a few seconds at 100 creates/s);
- watch lag: a pod is annotated with a timestamp and the time until the watch delivers that
  version is measured, p50/p99 over `--lag-samples` annotations spread over the run (target
  p99 <= 1 s);
- broker memory: the process's peak RSS with every pod cached (target <= 1 GiB).

Claim latency through the broker core at 10k warm pods is measured by the broker's own
benchmarks on top of this backend. The run creates its nodes and a namespace of its own and
deletes the pods at the end (`--keep` leaves them).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import secrets
import sys
import time
from collections.abc import Sequence
from typing import Any

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.cache import Change
from firepool.backends.kubernetes.status import Phase
from firepool.bench.common import machine, percentile, print_table, write_json
from firepool.model import FirepoolError, PoolSpec
from firepool.testing.kwok import (
    ensure_namespace,
    ensure_node,
    ensure_service_account,
    kwok_node,
    rest_for,
)

POOL = PoolSpec(name="bench", cpus_per_pod=0.1, memory_mib_per_pod=64, max_count=1_000_000)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench kubernetes")
    parser.add_argument("--kubeconfig", required=True, help="the test cluster (kwok nodes)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--qps", type=float, default=100.0, help="creates per second")
    parser.add_argument("--lag-samples", type=int, default=500)
    parser.add_argument("--namespace", default=None, help="default: a fresh fp-bench-<hex>")
    parser.add_argument("--keep", action="store_true", help="leave the pods running")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", default=None, help="write the figures here")
    return parser.parse_args(list(argv))


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    admin = rest_for(args.kubeconfig)
    namespace = args.namespace or f"fp-bench-{secrets.token_hex(3)}"
    started = time.monotonic()
    await asyncio.gather(
        *(
            asyncio.to_thread(ensure_node, admin, kwok_node(f"fp-bench-node-{i}"))
            for i in range(args.nodes)
        )
    )
    await asyncio.to_thread(ensure_namespace, admin, namespace)
    await asyncio.to_thread(ensure_service_account, admin, namespace)
    nodes_s = time.monotonic() - started
    settings = KubernetesSettings(
        namespace=namespace,
        kubeconfig=args.kubeconfig,
        instance="bench",
        agent_health=False,
        qps=args.qps,
        burst=max(1, int(args.qps)),
        delete_grace_s=0,
        api_threads=32,
    )
    backend = KubernetesBackend(settings)
    issued: dict[str, float] = {}
    running: dict[str, float] = {}
    lag_marks: dict[str, tuple[str, float]] = {}
    lags: list[float] = []
    all_running = asyncio.Event()

    def on_change(change: Change) -> None:
        if change.observed.phase is Phase.READY and change.name not in running:
            running[change.name] = change.at
            if len(running) >= args.pods:
                all_running.set()
        mark = lag_marks.get(change.name)
        if mark is not None:
            pod = backend.cache.pods.get(change.name) or {}
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if annotations.get(backend.codec.encode_key("lag")) == mark[0]:
                lags.append(change.at - mark[1])
                del lag_marks[change.name]

    def on_issue(name: str) -> None:
        issued[name] = time.monotonic()  # after pacing: the queue for the limiter is not lag

    backend.on_change = on_change
    backend.on_issue = on_issue
    await backend.start()
    create_started = time.monotonic()
    creating = asyncio.gather(
        *(backend.create(PodCreate(pool=POOL, name=f"bench-{i}")) for i in range(args.pods))
    )

    async def sample_lag() -> None:
        """Annotate running pods now and then, during and after the creates."""
        period = max(0.01, (args.pods / args.qps) / max(1, args.lag_samples))
        taken = 0
        while taken < args.lag_samples:
            candidates = [n for n in running if n not in lag_marks]
            if candidates:
                name = candidates[(taken * 7919) % len(candidates)]
                token = f"{taken}-{time.monotonic()}"
                lag_marks[name] = (token, time.monotonic())
                await backend.annotate(name, {"lag": token})
                taken += 1
            await asyncio.sleep(period)

    lagging = asyncio.create_task(sample_lag())
    await asyncio.wait_for(creating, args.timeout)
    create_s = time.monotonic() - create_started
    await asyncio.wait_for(all_running.wait(), args.timeout)
    running_s = time.monotonic() - create_started
    await asyncio.wait_for(lagging, args.timeout)
    deadline = time.monotonic() + 30
    while lag_marks and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    to_running = [running[n] - issued[n] for n in running if n in issued]
    peak_rss = rss_mib()
    cached = len(backend.cache.pods)
    if not args.keep:
        await backend.delete_all()
    await backend.close()
    admin.close()
    return {
        "nodes": args.nodes,
        "pods": args.pods,
        "qps": args.qps,
        "namespace": namespace,
        "nodes_setup_s": round(nodes_s, 2),
        "create_s": round(create_s, 2),
        "all_running_s": round(running_s, 2),
        "create_to_running_p50_s": percentile(to_running, 50),
        "create_to_running_p90_s": percentile(to_running, 90),
        "watch_lag_p50_s": percentile(lags, 50),
        "watch_lag_p99_s": percentile(lags, 99),
        "watch_lag_samples": len(lags),
        "cached_pods": cached,
        "peak_rss_mib": round(peak_rss, 1),
        "machine": machine(),
    }


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    try:
        result = asyncio.run(run(args))
    except FirepoolError as err:
        print(f"kubernetes benchmark: {err.code.value}: {err.message}", file=sys.stderr)
        return 2
    print_table(
        f"Kubernetes backend: {result['pods']} pods on {result['nodes']} kwok nodes",
        [
            ("create -> Running p50", f"{result['create_to_running_p50_s']:.3f} s", ""),
            ("create -> Running p90", f"{result['create_to_running_p90_s']:.3f} s", ""),
            ("watch lag p50", f"{result['watch_lag_p50_s'] * 1000:.1f} ms", ""),
            ("watch lag p99", f"{result['watch_lag_p99_s'] * 1000:.1f} ms", "<= 1000 ms"),
            ("peak RSS", f"{result['peak_rss_mib']:.0f} MiB", "<= 1024 MiB"),
            ("all running after", f"{result['all_running_s']:.1f} s", ""),
        ],
    )
    write_json(args.json, result)
    return 0

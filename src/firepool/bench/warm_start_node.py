"""`python -m firepool.bench warm-start --kubernetes`: the warm start on a real Kubernetes node
beside the local backend's, in one run, and a fresh pod's create -> Ready by phase.

Builds the pool image (`firepool image build`), starts the test cluster with its real node
(`testing.node_cluster`: kubelet, containerd, runc, the CNI bridge) and alternates rounds of
`warm_start.measure` on the local backend and on the node, so the machine's noise hits both
alike. The ratio is of the medians of the rounds' p50s.

Cold start: fresh pods created one at a time through the backend (as the broker's scaler does),
their API object polled every 10 ms from another thread, each phase stamped with this
machine's wall clock when it is first seen (the API's own timestamps have a one-second
resolution):
- create: the backend's create call (the pod's Secret, then the pod) until it returns;
- scheduled: -> the PodScheduled condition;
- sandbox: -> PodReadyToStartContainers (the pause container and the CNI bridge's veth);
- container: -> the agent's container running;
- ready: -> the Ready condition (the kubelet's readiness probe found the agent's port);
- agent: -> the backend's wait_ready returns (the agent's /v1/health answered ready).
The broker paper's cold start table splits the same way (placement, image, runtime start).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend
from firepool.bench.common import machine, percentile, print_table, write_json
from firepool.bench.warm_start_parts import measure
from firepool.image import build_pool_image
from firepool.model import PoolSpec
from firepool.service.catalog import Catalog
from firepool.testing.kwok import rest_for
from firepool.testing.node_cluster import (
    POOL_IMAGE,
    NodeCluster,
    node_catalog,
    node_pool,
    running_node_cluster,
)

PHASES = ("create", "scheduled", "sandbox", "container", "ready", "agent")
_POLL_S = 0.01


def _seen(pod: dict[str, Any]) -> set[str]:
    status = pod.get("status", {})
    found = {c["type"] for c in status.get("conditions", []) if c.get("status") == "True"}
    seen = set()
    if "PodScheduled" in found:
        seen.add("scheduled")
    if "PodReadyToStartContainers" in found:
        seen.add("sandbox")
    if any("running" in (c.get("state") or {}) for c in status.get("containerStatuses", [])):
        seen.add("container")
    if "Ready" in found:
        seen.add("ready")
    return seen


def cold_starts(cluster: NodeCluster, count: int) -> list[dict[str, float]]:
    """`count` fresh pods, one after another: each phase's duration in seconds."""
    admin = rest_for(str(cluster.plane.kubeconfig))
    pool = node_pool(min_count=0)
    results: list[dict[str, float]] = []

    async def one(backend: KubernetesBackend, name: str) -> dict[str, float]:
        stamps: dict[str, float] = {}
        done = threading.Event()
        path = f"/api/v1/namespaces/{cluster.namespace}/pods/{name}"

        def poll() -> None:
            while not done.is_set():
                try:
                    pod = admin.request("GET", path, "read the pod")
                except Exception:  # not created yet
                    pod = {}
                now = time.time()
                for phase in _seen(pod) - set(stamps):
                    stamps[phase] = now
                time.sleep(_POLL_S)

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        began = time.time()
        await backend.create(PodCreate(pool=pool, name=name))
        stamps["create"] = time.time()
        await backend.wait_ready(name, timeout=120)
        stamps["agent"] = time.time()
        done.set()
        watcher.join(5)
        previous, parts = began, {}
        for phase in PHASES:  # a phase seen in the same poll as the next one takes ~0
            at = max(stamps.get(phase, previous), previous)
            parts[phase], previous = at - previous, at
        parts["total"] = stamps["agent"] - began
        await backend.delete(name)
        return parts

    async def run() -> None:
        backend = KubernetesBackend(cluster.settings)
        try:
            await backend.start()
            for _ in range(count):
                results.append(await one(backend, f"cold-{secrets.token_hex(4)}"))
        finally:
            await backend.close()

    try:
        asyncio.run(run())
    finally:
        admin.close()
    return results


def compare_kubernetes(args: argparse.Namespace) -> int:
    rounds: dict[str, list[dict[str, float]]] = {"local": [], "kubernetes": []}
    with tempfile.TemporaryDirectory(prefix="firepool-bench-image-") as scratch:
        image = build_pool_image(Path(scratch) / "pool.oci.tar", name=POOL_IMAGE)
        with running_node_cluster(image.path) as cluster:
            local = Catalog((PoolSpec(name="cpu", min_count=1, max_count=2, idle_timeout=600.0),))
            node = node_catalog(node_pool(min_count=1, max_count=2, idle_timeout=600.0))
            arms: dict[str, dict[str, Any]] = {
                "local": {"catalog": local},
                "kubernetes": {
                    "catalog": node,
                    "backend": "kubernetes",
                    "kubernetes": cluster.settings,
                    "host": cluster.node.gateway,
                },
            }
            for i in range(args.rounds):
                order = ("local", "kubernetes") if i % 2 == 0 else ("kubernetes", "local")
                for arm in order:
                    parts = measure(args.jobs, None, **arms[arm])
                    ms = {k: [v * 1000.0 for v in vals] for k, vals in parts.items()}
                    rounds[arm].append(
                        {f"{k}_p50": percentile(v, 50) for k, v in ms.items()}
                        | {"total_p90": percentile(ms["total"], 90)}
                    )
            cold = cold_starts(cluster, args.cold)
    summary = {
        arm: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for arm, rows in rounds.items()
    }
    ratio = summary["kubernetes"]["total_p50"] / summary["local"]["total_p50"]
    cold_ms = {p: statistics.median(c[p] * 1000.0 for c in cold) for p in (*PHASES, "total")}
    result: dict[str, object] = {
        "rounds": args.rounds,
        "jobs_per_round": args.jobs,
        "per_round": rounds,
        "median_of_rounds": summary,
        "kubernetes_over_local_total_p50": ratio,
        "cold_start_ms_median": cold_ms,
        "cold_starts": cold,
        "image_mib": image.size / 2**20,
        "machine": machine(),
    }
    local_row, node_row = summary["local"], summary["kubernetes"]
    print_table(
        f"warm start, {args.rounds} alternated rounds of {args.jobs} jobs (medians of p50, ms)",
        [
            ("submit -> first instruction p50", f"{local_row['total_p50']:.1f}",
             f"{node_row['total_p50']:.1f}"),
            ("submit -> first instruction p90", f"{local_row['total_p90']:.1f}",
             f"{node_row['total_p90']:.1f}"),
            *((f"  {k}", f"{local_row[k + '_p50']:.1f}", f"{node_row[k + '_p50']:.1f}")
              for k in ("accept", "dispatch", "handoff", "first")),
            ("kubernetes / local (target <= 2)", "", f"{ratio:.2f}"),
        ],
        columns=("", "local", "kubernetes node"),
    )  # fmt: skip
    print_table(
        f"a fresh pod on the node, create -> agent ready (median of {len(cold)}, ms)",
        [(phase, f"{cold_ms[phase]:.0f}", "-") for phase in (*PHASES, "total")],
        columns=("phase", "ms", ""),
    )
    write_json(args.json_path, result)
    return 0

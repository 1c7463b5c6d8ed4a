"""One warm-start measurement: a broker on a temporary store, `jobs` warm jobs, each split into
its parts (`bench/warm_start.py` says what each part is). Of its own because both the local
benchmark and the Kubernetes node's (`bench/warm_start_node.py`) run it, and the local one only
loads the Kubernetes one when asked to."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from firepool.model import PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.service import running_broker, wait_job

BODY = "import time; print(repr(time.time()), flush=True)"


def measure(
    jobs: int,
    store_url: str | None,
    network_namespace: bool = True,
    *,
    catalog: Catalog | None = None,
    **broker_options: Any,
) -> dict[str, list[float]]:
    """Per-job parts in seconds; `catalog` (a pool `cpu`) and `broker_options` choose the
    backend (the local one by default)."""
    pool = PoolSpec(name="cpu", min_count=1, max_count=2, idle_timeout=600.0)
    parts: dict[str, list[float]] = {
        k: [] for k in ("total", "accept", "dispatch", "handoff", "first")
    }
    with (
        tempfile.TemporaryDirectory(prefix="firepool-bench-") as tmp,
        running_broker(
            Path(tmp),
            catalog=catalog or Catalog((pool,)),
            config=BrokerConfig(),
            store_url=store_url,
            network_namespace=network_namespace,
            **broker_options,
        ) as broker,
        broker.client() as client,
    ):
        for i in range(jobs + 1):
            t0 = time.time()
            resp = client.post(
                "/v1/jobs",
                json={"pool": "cpu", "command": ["python", "-c", BODY], "lease_tag": "bench"},
            )
            accepted = time.time()
            job = wait_job(client, resp.json()["id"], timeout=60)
            log = client.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
            first = float(log.strip().splitlines()[0])
            t = job["timings"]
            if i == 0 or job["pods"][0]["acquisition"] != "warm":
                continue  # the cold first job, or a job that did not find the warm pod
            parts["total"].append(first - t0)
            parts["accept"].append(accepted - t0)
            parts["dispatch"].append(t["assigned"] - t["submitted"])
            parts["handoff"].append(t["started"] - t["assigned"])
            parts["first"].append(first - t["started"])
    return parts

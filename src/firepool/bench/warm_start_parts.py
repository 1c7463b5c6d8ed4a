"""One warm-start measurement: a broker on a temporary store, `jobs` warm jobs, each split into
its parts (`bench/warm_start.py` says what each part is). Of its own because both the local
benchmark and the Kubernetes node's (`bench/warm_start_node.py`) run it, and the local one only
loads the Kubernetes one when asked to.

Two ways to run the broker. `measure_served` starts `firepool serve` in a process of its own and
drives it with the SDK, as a caller does: this is the figure a caller sees. `measure` runs the
broker on a thread of this process, polled with raw HTTP: the way every figure up to 2026-12-07
was taken, kept for the node and network comparisons (each compares two variants of one setup
side by side). There the caller shares the broker's interpreter lock, and the broker runs on
the default event loop without `firepool serve`'s tuning, which added about a millisecond per
job (docs/performance.md, "2026-12-07, afternoon")."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from firepool.model import AcquisitionPath, PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.service import running_broker, wait_job

BODY = "import time; print(repr(time.time()), flush=True)"
#: The warm pool: one pod kept for the caller, room for a second.
POOL = PoolSpec(name="cpu", min_count=1, max_count=2, idle_timeout=600.0)


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
    parts = _no_parts()
    with (
        tempfile.TemporaryDirectory(prefix="firepool-bench-") as tmp,
        running_broker(
            Path(tmp),
            catalog=catalog or Catalog((POOL,)),
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
            if i == 0 or job["pods"][0]["acquisition"] != "warm":
                continue  # the cold first job, or a job that did not find the warm pod
            t = job["timings"]
            _add(parts, t0, accepted, _printed_time(log), t["submitted"], t["assigned"],
                 t["started"])  # fmt: skip
    return parts


def measure_served(jobs: int, store_url: str | None) -> dict[str, list[float]]:
    """Per-job parts in seconds against `firepool serve` (SQLite in its data directory, or
    `store_url`), through the SDK: `submit`, then `wait` (a long poll: one request that the
    broker answers at the verdict) and `logs`."""
    from firepool.client.sync import Client
    from firepool.experiment.fault_targets import ServeProcess

    parts = _no_parts()
    with tempfile.TemporaryDirectory(prefix="firepool-bench-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        catalog = Path(tmp) / "pools.toml"
        catalog.write_text(_catalog_toml(POOL))
        server = ServeProcess(data, catalog, store_url, isolation="auto")
        server.start()
        try:
            with Client(data_dir=data) as client:
                for i in range(jobs + 1):
                    t0 = time.time()
                    job = client.submit("cpu", ["python", "-c", BODY], lease_tag="bench")
                    accepted = time.time()
                    job = client.wait(job.id, timeout=60)
                    log = "".join(client.logs(job.id))
                    if i == 0 or job.pods[0].acquisition is not AcquisitionPath.WARM:
                        continue  # the cold first job, or a job that did not find the warm pod
                    t = job.timings
                    _add(parts, t0, accepted, _printed_time(log), t.submitted, t.assigned,
                         t.started)  # fmt: skip
        finally:
            server.stop()
    return parts


def _catalog_toml(pool: PoolSpec) -> str:
    """`pool` as a one-pool catalog file (JSON's strings and numbers are TOML's too)."""
    fields = pool.model_dump(mode="json", exclude_defaults=True)
    return "[[pools]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


def _no_parts() -> dict[str, list[float]]:
    return {k: [] for k in ("total", "accept", "dispatch", "handoff", "first")}


def _printed_time(log: str) -> float:
    """The job's first line: the wall clock at its first statement."""
    return float(log.strip().splitlines()[0])


def _add(
    parts: dict[str, list[float]],
    t0: float,
    accepted: float,
    first: float,
    submitted: float | None,
    assigned: float | None,
    started: float | None,
) -> None:
    if submitted is None or assigned is None or started is None:
        raise ValueError("a finished warm job lacks one of its timings")
    parts["total"].append(first - t0)
    parts["accept"].append(accepted - t0)
    parts["dispatch"].append(assigned - submitted)
    parts["handoff"].append(started - assigned)
    parts["first"].append(first - started)

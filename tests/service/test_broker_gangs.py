"""Gang jobs on real local pods: a `topology=torchrun` task job gets torchrun's variables on
every rank and runs a real torch.distributed (gloo) all-reduce across its pods; a rank that
dies fails the whole attempt, the other rank is stopped, and every pod is reset."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, run, running_broker

pytest.importorskip("torch")

# network host: a gang's ranks rendezvous over TCP between their pods
POOL = cpu_pool(network="host",
                min_count=2, max_idle_count=2, max_count=2, idle_timeout=120.0,
                memory_mib_per_pod=1024, step=2)

ALL_REDUCE = """
import os, torch, torch.distributed as dist
need = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
assert all(os.environ.get(k) for k in need), {k: os.environ.get(k) for k in need}
dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank}/{world} sum {t.item()} port {os.environ['MASTER_PORT']}")
dist.destroy_process_group()
"""

DIES = """
import os, sys, time
if os.environ["RANK"] == "1":
    sys.exit(7)
time.sleep(120)  # rank 0 would run on: the attempt must stop it
"""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2,
                          exit_poll_s=0.5)
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 2}),
                        config=config) as handle:
        yield handle


def test_a_torchrun_gang_all_reduces_across_its_pods(broker: BrokerThread) -> None:
    with broker.client() as c:
        job = run(c, timeout=180, pods=2, topology="torchrun", lease_tag="gang",
                  command=[sys.executable, "-c", ALL_REDUCE])
        assert job["state"] == "SUCCEEDED", job
        assert len({p["name"] for p in job["pods"]}) == 2
        out = c.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
        assert "rank 0/2 sum 3.0" in out  # 1 + 2: both ranks took part
        again = run(c, timeout=180, pods=2, topology="torchrun", lease_tag="gang",
                    command=[sys.executable, "-c", ALL_REDUCE])
        assert again["state"] == "SUCCEEDED"
        second = c.get(f"/v1/jobs/{again['id']}/logs").json()["data"]
        assert "sum 3.0" in second and [p["acquisition"] for p in again["pods"]] == ["warm"] * 2


def test_a_dead_rank_fails_the_attempt_and_stops_the_other(broker: BrokerThread) -> None:
    with broker.client() as c:
        job = run(c, timeout=120, pods=2, topology="torchrun", lease_tag="gang",
                  command=[sys.executable, "-c", DIES])
        # Rank 0 sleeps 120 s: the job ends within `run`'s bound only because it was stopped;
        # the verdict names the rank that failed, not the one the broker stopped.
        assert (job["state"], job["error_class"], job["exit_code"]) == (
            "FAILED", "NonZeroExit", 7), job
        assert "rank 1 failed first" in (job["message"] or "")
        # Both pods were stopped and reset: the gang runs again at once on the same pods.
        again = run(c, timeout=180, pods=2, topology="torchrun", lease_tag="gang",
                    command=[sys.executable, "-c", ALL_REDUCE])
        assert again["state"] == "SUCCEEDED"
        assert {p["name"] for p in again["pods"]} == {p["name"] for p in job["pods"]}

"""Ray gangs on real local pods: a `topology=ray` job on three pods starts a Ray head on rank 0
and a worker node on each other rank (three nodes on one IP, every port from the attempt), runs
the job's command on rank 0 as the driver, and a task lands on every node. The reset takes
Ray down: no process of the gang survives, its port is closed, and a later job on the same
pods finds no /tmp/ray (the verified reset let the pods run again)."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, run, running_broker

try:
    import ray  # noqa: F401  (the `[ray]` extra)
except ImportError:  # pragma: no cover - CI installs the extra
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("the [ray] extra is not installed", allow_module_level=True)

# network host: a gang's ranks rendezvous over TCP between their pods
POOL = cpu_pool(network="host",
                min_count=3, max_idle_count=3, max_count=3, idle_timeout=600.0,
                memory_mib_per_pod=2048, step=3)

DRIVER = """
import os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()  # RAY_ADDRESS: the head rank 0 started
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]

@ray.remote(num_cpus=1)
def where():
    return ray.get_runtime_context().get_node_id(), os.environ["FIREPOOL_POD"]

seen = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
                .remote() for n in nodes])
print(f"nodes {len(nodes)} ran-on {len({n for n, _ in seen})} "
      f"pods {len({p for _, p in seen})} head {os.environ['RAY_ADDRESS']}")
"""

AFTER = """
import os, socket, sys
port = int(sys.argv[1])
with socket.socket() as s:
    open_ = s.connect_ex(("127.0.0.1", port)) == 0
print(f"tmp-ray {os.path.exists('/tmp/ray')} head-port-open {open_}")
"""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2,
                          exit_poll_s=0.5)
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 3}),
                        config=config) as handle:
        yield handle


def ray_processes_of(pods: set[str]) -> list[str]:
    """Host-side: processes still alive that carry one of these pods' marker and run Ray."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if any(f"FIREPOOL_POD={p}".encode() in environ for p in pods) and b"ray" in cmdline:
            found.append(f"{pid}: {cmdline[:120]!r}")
    return found


def test_a_ray_gang_runs_a_task_on_every_node_and_reset_takes_ray_down(
    broker: BrokerThread,
) -> None:
    with broker.client() as c:
        job = run(c, timeout=600, pods=3, topology="ray", lease_tag="ray",
                  command=[sys.executable, "-c", DRIVER])
        out = c.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
        assert job["state"] == "SUCCEEDED", (job, out[-3000:])
        pods = {p["name"] for p in job["pods"]}
        assert len(pods) == 3
        # Three nodes, a task ran on each, and each node is a different pod.
        assert "nodes 3 ran-on 3 pods 3" in out, out[-3000:]
        head = re.search(r"head 127\.0\.0\.1:(\d+)", out)
        assert head is not None, out[-3000:]
        # Every pod was reset (the job ended only after): nothing of Ray runs on.
        assert ray_processes_of(pods) == []
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", int(head.group(1)))) != 0
        # The same three pods take the next job: the reset was verified clean, and their
        # private /tmp holds no Ray session directory or socket.
        after = run(c, timeout=120, pods=3, lease_tag="ray",
                    command=[sys.executable, "-c", AFTER, head.group(1)])
        assert after["state"] == "SUCCEEDED", after
        assert {p["name"] for p in after["pods"]} == pods
        logs = c.get(f"/v1/jobs/{after['id']}/logs").json()["data"]
        assert "tmp-ray False head-port-open False" in logs, logs

"""A torchrun gang of two pods on the real node: a gloo all-reduce between two containers.

The pool image carries no torch (a pool's jobs bring their own libraries in an image built
FROM it); here this machine's torch reaches the pods through a read-only host mount of the
test environment's site-packages (`PodTemplate.host_mounts`), so the ranks run the same torch
the local gang test does.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.backends.kubernetes import KubernetesSettings
from firepool.backends.kubernetes.settings import HostMount, Templates
from firepool.model import NetworkAccess
from firepool.service.broker import BrokerConfig
from firepool.testing.kubelet_node import KubeletNode
from firepool.testing.node_cluster import node_catalog, node_pool, node_settings, node_template
from firepool.testing.service import BrokerThread, run, running_broker

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

SITE = str(Path(torch.__file__).resolve().parents[1])
PYTHON_MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"

ALL_REDUCE = """
import sys
sys.path.insert(0, "/opt/site")
import datetime, os, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank}/{world} sum {t.item()} master {os.environ['MASTER_ADDR']}", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture
def gang_broker(
    real_node: KubeletNode, settings: KubernetesSettings, tmp_path: Path
) -> Iterator[BrokerThread]:
    template = node_template().model_copy(
        update={"host_mounts": (HostMount(host_path=SITE, mount_path="/opt/site"),)}
    )
    cluster = node_settings(settings).model_copy(update={"templates": Templates(defaults=template)})
    # network host: a gang's ranks rendezvous over TCP between their pods
    pool = node_pool(network=NetworkAccess.HOST, min_count=2, max_idle_count=2, max_count=2,
                     memory_mib_per_pod=1024, step=2)  # fmt: skip
    with running_broker(
        tmp_path / "broker",
        catalog=node_catalog(pool, budget=2),
        config=BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2),
        backend="kubernetes",
        kubernetes=cluster,
        host=real_node.gateway,
    ) as handle:
        yield handle


def test_a_torchrun_gang_of_two_pods_all_reduces_over_gloo(
    gang_broker: BrokerThread, real_node: KubeletNode
) -> None:
    assert PYTHON_MINOR == "3.11"  # the image's interpreter is this one (firepool image build)
    with gang_broker.client("alice") as client:
        job = run(client, command=["python", "-c", ALL_REDUCE], pods=2, topology="torchrun",
                  timeout=240)  # fmt: skip
        logs = [client.get(f"/v1/jobs/{job['id']}/logs", params={"rank": r}).json()["data"]
                for r in (0, 1)]  # fmt: skip
        assert job["state"] == "SUCCEEDED", (job, logs)
        assert len({p["name"] for p in job["pods"]}) == 2
    # Each rank's own line; c10d may add a warning around it (on this node no DNS answers a
    # reverse lookup of the other pod's address, which a cluster's DNS would).
    lines = {r: [line for line in log.splitlines() if line.startswith("rank ")]
             for r, log in enumerate(logs)}  # fmt: skip
    master = lines[0][-1].split()[-1]
    assert lines == {r: [f"rank {r}/2 sum 3.0 master {master}"] for r in (0, 1)}
    assert ipaddress.ip_address(master) in real_node.subnet  # rank 0's pod IP

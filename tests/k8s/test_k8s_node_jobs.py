"""Jobs end to end on the real node: the broker on the Kubernetes backend, pods in containers.

The broker listens on the node's bridge address (where the pods reach it), creates its pods
through the API server as the shipped Role, and reaches their agents at their pod IPs; the
agents call back to it. Every pod runs the pool image built by `firepool image build`.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firepool.backends.kubernetes import KubernetesSettings
from firepool.service.broker import BrokerConfig
from firepool.testing.kubelet_node import KubeletNode
from firepool.testing.node_cluster import node_catalog, node_settings
from firepool.testing.service import BrokerThread, run, running_broker, submit, wait_job

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

FAST = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)


@pytest.fixture
def node_broker(
    real_node: KubeletNode, settings: KubernetesSettings, tmp_path: Path
) -> Iterator[BrokerThread]:
    with running_broker(
        tmp_path / "broker",
        catalog=node_catalog(),
        config=FAST,
        backend="kubernetes",
        kubernetes=node_settings(settings),
        host=real_node.gateway,
    ) as handle:
        yield handle


def py(code: str) -> list[str]:
    return ["python", "-c", code]


def the_pod(job: dict[str, Any]) -> str:
    (pod,) = job["pods"]
    name: str = pod["name"]
    return name


def test_a_job_runs_in_a_container_on_the_node_and_streams_its_output(
    node_broker: BrokerThread, real_node: KubeletNode
) -> None:
    code = (
        "import json, os, socket, sys, time\n"
        "print('first', flush=True)\n"
        "time.sleep(2.5)\n"
        "print(json.dumps({'host': socket.gethostname(), 'uid': os.getuid(),"
        " 'exe': sys.executable, 'cgroup': open('/proc/self/cgroup').read()}), flush=True)\n"
    )
    with node_broker.client("alice") as client:
        job_id = submit(client, command=py(code))
        seen_running = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the log grows while the job runs
            job = client.get(f"/v1/jobs/{job_id}").json()
            logs = client.get(f"/v1/jobs/{job_id}/logs").json()
            if job["state"] == "RUNNING" and "first" in logs["data"]:
                seen_running = logs["data"]
                break
            assert job["state"] in ("QUEUED", "RUNNING"), job
            time.sleep(0.1)
        assert seen_running.strip() == "first"
        job = wait_job(client, job_id, timeout=60)
        assert job["state"] == "SUCCEEDED", job
        data = client.get(f"/v1/jobs/{job_id}/logs").json()
        assert data["complete"]
        lines = data["data"].splitlines()
        assert lines[0] == "first"
        inside = json.loads(lines[1])
        pod = the_pod(job)
        assert inside["host"] == pod  # a container of the pod, not a process on this host
        assert inside["uid"] == 10001
        assert inside["exe"].startswith("/opt/firepool/")
        assert real_node.cgroup_root.lstrip("/") in inside["cgroup"]
    # The broker reached the agent at the pod's IP on the node's bridge.
    record = node_broker.run(node_broker.embedded.backend.get(pod))
    assert record is not None and record.address
    host = record.address.split("//")[-1].rsplit(":", 1)[0]
    assert ipaddress.ip_address(host) in real_node.subnet


def test_same_caller_reuses_its_pod_and_another_caller_never_does(
    node_broker: BrokerThread,
) -> None:
    with node_broker.client("alice") as alice, node_broker.client("bob") as bob:
        first = run(alice, command=py("print('a1')"), lease_tag="s", timeout=120)
        assert first["state"] == "SUCCEEDED", first
        pod = the_pod(first)
        again = run(alice, command=py("print('a2')"), lease_tag="s", timeout=120)
        assert (the_pod(again), again["pods"][0]["acquisition"]) == (pod, "warm")
        other = run(bob, command=py("print('b1')"), timeout=120)
        assert other["state"] == "SUCCEEDED", other
        assert the_pod(other) != pod


def test_a_package_job_fetches_its_code_from_the_broker_and_the_sdk_follows_its_output(
    node_broker: BrokerThread, tmp_path: Path
) -> None:
    """Late binding on the node: the pod's agent fetches the job's package from the broker's
    advertised address (the node's bridge), not from the image; the SDK streams its output."""
    from firepool.client.sync import Client

    source = tmp_path / "pkg"
    source.mkdir()
    (source / "main.py").write_text("import helper\nprint(helper.GREETING, flush=True)\n")
    (source / "helper.py").write_text("GREETING = 'hello from the package'\n")
    token = node_broker.issue("carol")
    with Client(node_broker.url, token) as client:
        job = client.run("cpu", ["python", "main.py"], package=str(source), wait_timeout=120)
        assert job.state.value == "SUCCEEDED", job
        assert "".join(client.logs(job.id, follow=True)).strip() == "hello from the package"

"""Failures that only a real node shows: an image that is not there, a container over its
memory limit, the kubelet killed and restarted, the agent killed inside a running pod."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from firepool.backends.kubernetes import KubernetesSettings
from firepool.service.broker import BrokerConfig
from firepool.testing.kubelet_node import KubeletNode
from firepool.testing.node_cluster import node_catalog, node_pool, node_settings
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job
from firepool.testing.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

FAST = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)


def py(code: str) -> list[str]:
    return ["python", "-c", code]


@pytest.fixture
def start_broker(
    real_node: KubeletNode, settings: KubernetesSettings, tmp_path: Path
) -> Iterator[Any]:
    """Start a broker on the node with the given pool knobs (one per test)."""
    stack: list[Any] = []

    def start(**pool: Any) -> BrokerThread:
        context = running_broker(
            tmp_path / "broker",
            catalog=node_catalog(node_pool(**pool), budget=pool.get("max_count", 3)),
            config=FAST,
            backend="kubernetes",
            kubernetes=node_settings(settings),
            host=real_node.gateway,
        )
        stack.append(context)
        broker: BrokerThread = context.__enter__()
        return broker

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    total = 0.0
    for line in client.get("/metrics").text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def api_pods(broker: BrokerThread) -> list[str]:
    records = broker.run(broker.embedded.backend.list_pods())
    return [r.name for r in records]


def test_a_missing_image_is_a_typed_error_and_its_budget_is_released(
    start_broker: Any,
) -> None:
    broker = start_broker(image="docker.io/firepool/absent:1", min_count=0, max_count=1)
    ledger = broker.embedded.broker.ledger
    with broker.client("alice") as client:
        job_id = submit(client, command=py("print('never')"))
        wait_until(
            "a start failure counted as a typed error",
            lambda: (
                metric(
                    client,
                    "firepool_pod_start_failures_total",
                    pool="cpu",
                    code="ConfigError",
                    kind="ImagePullError",
                )
                >= 1
            ),
            timeout=90,
        )
        assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "QUEUED"
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        wait_until(
            "the failed pods deleted and their budget released",
            lambda: broker.call(lambda: ledger.used("cpu")) == 0 and not api_pods(broker),
            timeout=60,
        )
        assert wait_job(client, job_id)["state"] == "CANCELLED"


def test_the_kubelet_killed_and_restarted_runs_nothing_twice(
    start_broker: Any, real_node: KubeletNode
) -> None:
    broker = start_broker()
    code = (
        "import time, uuid\n"
        "print('run', uuid.uuid4().hex, flush=True)\n"
        "time.sleep(6)\n"
        "print('done', flush=True)\n"
    )
    with broker.client("alice") as client:
        job_id = submit(client, command=py(code))
        wait_until(
            "the job running",
            lambda: "run" in client.get(f"/v1/jobs/{job_id}/logs").json()["data"],
            timeout=120,
        )
        real_node.kill_kubelet()
        time.sleep(3)  # the containers run on without it, as on a real node
        real_node.start_kubelet()
        real_node.wait_ready()
        job = wait_job(client, job_id, timeout=120)
        assert job["state"] == "SUCCEEDED", job
        assert job["retries"] == 0  # one attempt: nothing ran twice
        lines = client.get(f"/v1/jobs/{job_id}/logs").json()["data"].splitlines()
        assert [line.split()[0] for line in lines] == ["run", "done"]
        # The pod came back with the kubelet and serves the next job.
        again = wait_job(client, submit(client, command=py("print('after')")), timeout=120)
        assert again["state"] == "SUCCEEDED", again


def _agent_pid(pod: str) -> int:
    """The host's pid of `pod`'s agent (its container's first process)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"firepool.agent" in argv and f"HOSTNAME={pod}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no agent process of {pod} on this host")


def test_the_agent_killed_in_a_running_pod_loses_the_pod_and_retries_the_job(
    start_broker: Any,
) -> None:
    broker = start_broker()
    code = "import time; print('attempt', flush=True); time.sleep(30)"
    with broker.client("alice") as client:
        job_id = submit(client, command=py(code), max_retries=1)
        wait_until(
            "the job running",
            lambda: "attempt" in client.get(f"/v1/jobs/{job_id}/logs").json()["data"],
            timeout=120,
        )
        pod = client.get(f"/v1/jobs/{job_id}").json()["pods"][0]["name"]
        os.kill(_agent_pid(pod), signal.SIGKILL)
        wait_until(
            "the job's first attempt lost with its pod and the job queued again or running",
            lambda: client.get(f"/v1/jobs/{job_id}").json()["retries"] == 1,
            timeout=120,
        )
        wait_until("the lost pod deleted", lambda: pod not in api_pods(broker), timeout=60)
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["state"] in ("QUEUED", "RUNNING"), job
        client.post(f"/v1/jobs/{job_id}/cancel")
        assert wait_job(client, job_id, timeout=60)["state"] == "CANCELLED"


def test_a_job_over_the_containers_memory_limit_fails_as_oom(start_broker: Any) -> None:
    """The container's limit holds the agent and its jobs; the kernel kills the largest
    process under it, the job, and counts the kill in the container's memory cgroup, which
    the agent reads for its verdict. The agent lives, so the pod is reset and verified as
    after any job (a pod whose agent the kernel killed is lost instead: the test above)."""
    broker = start_broker(memory_mib_per_pod=192)
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))"
    with broker.client("alice") as client:
        job = wait_job(client, submit(client, command=py(hog), lease_tag="s"), timeout=120)
        assert (job["state"], job["error_class"]) == ("FAILED", "OOM"), job
        pod = job["pods"][0]["name"]
        after = wait_job(client, submit(client, command=py("print(1)"), lease_tag="s"), 120)
        assert after["state"] == "SUCCEEDED", after
        assert after["pods"][0]["name"] == pod  # its reset was verified clean

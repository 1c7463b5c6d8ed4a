"""Helpers for tests and the benchmark against a real API server with kwok nodes.

Nodes are created as plain Node objects carrying kwok's annotation, so a running kwok
controller (`--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake`) keeps them
Ready and moves their pods to Running; the scheduler places pods on them as on any node.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes.backend import KubernetesBackend
from firepool.backends.kubernetes.errors import PodConflictError, PodNotFoundError
from firepool.backends.kubernetes.rest import Rest, load_configuration
from firepool.backends.kubernetes.status import Phase, observe
from firepool.model import PoolSpec

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
#: The GPU nodes (8 x nvidia.com/gpu each) the integration tests make.
TEST_GPU_NODES = [f"fp-test-gpu-{i}" for i in range(2)]


def rest_for(kubeconfig: str) -> Rest:
    return Rest(load_configuration(kubeconfig, None, 8))


def kwok_node(name: str, *, cpu: str = "32", memory: str = "256Gi", gpus: int = 0,
              labels: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "allocatable": capacity,
            "capacity": capacity,
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def ensure_node(rest: Rest, node: dict[str, Any]) -> None:
    with contextlib.suppress(PodConflictError):
        rest.request("POST", "/api/v1/nodes", "create node", body=node)


def delete_node(rest: Rest, name: str) -> None:
    with contextlib.suppress(PodNotFoundError):
        rest.request("DELETE", f"/api/v1/nodes/{name}", "delete node")


def ensure_namespace(rest: Rest, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    with contextlib.suppress(PodConflictError):
        rest.request("POST", "/api/v1/namespaces", "create namespace", body=body)


def delete_namespace(rest: Rest, name: str) -> None:
    with contextlib.suppress(PodNotFoundError):
        rest.request("DELETE", f"/api/v1/namespaces/{name}", "delete namespace")


def ensure_service_account(rest: Rest, namespace: str) -> None:
    """The ServiceAccount admission plugin wants a `default` account in the namespace; the
    controller that makes it may not run in a minimal cluster."""
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    with contextlib.suppress(PodConflictError):
        rest.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", "create sa", body=body
        )


#: The shipped manifests that give the broker its rights in one namespace.
DEPLOY_BASE = Path(__file__).resolve().parents[3] / "deploy" / "base"
BROKER_ACCOUNT = "firepool-broker"


def shipped_rbac(namespace: str) -> list[dict[str, Any]]:
    """deploy/base's ServiceAccount, Role and RoleBinding as they would be applied to
    `namespace` (kustomize fills the binding's subject namespace; so does this)."""
    documents = []
    for name in ("serviceaccount.yaml", "role.yaml", "rolebinding.yaml"):
        document = yaml.safe_load((DEPLOY_BASE / name).read_text())
        document["metadata"]["namespace"] = namespace
        for subject in document.get("subjects") or []:
            subject.setdefault("namespace", namespace)
        documents.append(document)
    return documents


def grant_broker_role(rest: Rest, namespace: str, *, expiration_s: int = 7200) -> str:
    """Apply the shipped Role bound to the broker's ServiceAccount in `namespace` and return a
    token of that account (TokenRequest), so a test acts with exactly the rights a deployed
    broker has, not as cluster-admin."""
    paths = {
        "ServiceAccount": f"/api/v1/namespaces/{namespace}/serviceaccounts",
        "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
    }
    for document in shipped_rbac(namespace):
        with contextlib.suppress(PodConflictError):
            rest.request("POST", paths[document["kind"]], f"create {document['kind']}",
                         body=document)  # fmt: skip
    answer = rest.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{BROKER_ACCOUNT}/token",
        "request a token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_s},
        },
    )
    return str(answer["status"]["token"])


# ---------------------------------------------------------------------- for the cluster tests

#: Pools the cluster tests and the benchmark create (kwok pods run no process, so the image
#: is never pulled).
TEST_CPU_POOL = PoolSpec(name="cpu", cpus_per_pod=0.1, memory_mib_per_pod=64, image="busybox:1.36")
TEST_GPU_POOL = PoolSpec(
    name="h100",
    accelerator="H100",
    accelerators_per_pod=1,
    standbys_per_active=1,
    cpus_per_pod=0.1,
    memory_mib_per_pod=64,
)

T = TypeVar("T")


def run_bounded(make: Callable[[], Awaitable[T]], timeout: float = 120) -> T:
    """Run one test's coroutine in a fresh loop, failing it after `timeout` seconds."""

    async def go() -> T:
        return await asyncio.wait_for(make(), timeout)

    return asyncio.run(go())


async def create_ready(backend: KubernetesBackend, *requests: PodCreate) -> list[str]:
    """Create the pods and wait until every one is Ready; their names."""
    records = await asyncio.gather(*(backend.create(r) for r in requests))
    await asyncio.gather(*(backend.wait_ready(r.name, timeout=60) for r in records))
    return [r.name for r in records]


def phase_of(backend: KubernetesBackend, name: str) -> Phase | None:
    """The pod's phase as the backend's cache sees it (None: not in the cache)."""
    pod = backend.cache.pods.get(name)
    return None if pod is None else observe(pod).phase


def node_of(backend: KubernetesBackend, name: str) -> str:
    return str(backend.cache.pods[name]["spec"].get("nodeName"))


def agent_container(admin: Rest, namespace: str, name: str) -> dict[str, Any]:
    """The pod's one container as the API server holds it (the backend's cache keeps only
    what it reads: no spec beyond the node)."""
    pod = admin.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}", "read pod")
    (container,) = pod["spec"]["containers"]
    return dict(container)

"""Helpers for tests and the benchmark against a real API server with kwok nodes.

Nodes are created as plain Node objects carrying kwok's annotation, so a running kwok
controller (`--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake`) keeps them
Ready and moves their pods to Running; the scheduler places pods on them as on any node.
"""

from __future__ import annotations

import contextlib
from typing import Any

from firepool.backends.kubernetes.errors import PodConflictError, PodNotFoundError
from firepool.backends.kubernetes.rest import Rest, load_configuration

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

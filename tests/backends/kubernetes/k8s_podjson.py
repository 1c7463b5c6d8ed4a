"""Pod objects as the API server returns them, for the pure tests (plain JSON fixtures)."""

from __future__ import annotations

from typing import Any


def pod(
    name: str = "cpu-1",
    *,
    phase: str = "Pending",
    node: str | None = None,
    ip: str | None = None,
    rv: str = "1",
    conditions: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    reason: str | None = None,
    message: str | None = None,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "resourceVersion": rv,
        "creationTimestamp": "2026-11-30T23:00:00Z",
        "labels": labels if labels is not None else {"firepool.dev/pool": "cpu"},
        "annotations": annotations or {},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-30T23:05:00Z"
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status["podIP"] = ip
    if conditions is not None:
        status["conditions"] = conditions
    if containers is not None:
        status["containerStatuses"] = containers
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    spec: dict[str, Any] = {"containers": [{"name": "agent"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def running(name: str = "cpu-1", *, ready: bool = True, **kw: Any) -> dict[str, Any]:
    return pod(
        name,
        phase="Running",
        node=kw.pop("node", "node-1"),
        ip=kw.pop("ip", "10.0.0.7"),
        conditions=[
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ],
        containers=[{"name": "agent", "ready": ready, "state": {"running": {}}}],
        **kw,
    )

"""A pod object from the API server, as the broker's `PodRecord`. Pure.

This is the whole of restart recovery on the backend side: every fact the broker needs
(pool, role, card, creation time, template version and the broker's own annotations) is read
back from the pod's labels and annotations, and its agent secret from the pod's Secret, so a
new broker process rebuilds exactly the records the old one had.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from firepool.backends.base import PodRecord
from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.status import observe
from firepool.model import PodRole

ISOLATION = "container"


def _created_at(metadata: dict[str, Any], codec: AnnotationCodec) -> float:
    raw = (metadata.get("annotations") or {}).get(codec.own("created-at"))
    try:
        return float(raw) if raw else _timestamp(metadata.get("creationTimestamp"))
    except ValueError:
        return _timestamp(metadata.get("creationTimestamp"))


def _timestamp(value: Any) -> float:
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def http_url(host: str, port: int) -> str:
    """`http://host:port`, with an IPv6 address in brackets (a dual-stack cluster's pod IP)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def is_ours(pod: dict[str, Any], codec: AnnotationCodec) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return codec.own("pool") in labels


def to_record(
    pod: dict[str, Any],
    codec: AnnotationCodec,
    *,
    secret: str,
    agent_port: int,
    deleting: bool = False,
) -> PodRecord:
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    seen = observe(pod)
    try:
        role = PodRole(labels.get(codec.own("role"), PodRole.ACTIVE.value))
    except ValueError:
        role = PodRole.ACTIVE
    devices = tuple(d for d in annotations.get(codec.own("devices"), "").split(",") if d)
    try:
        template = int(annotations.get(codec.own("template-version"), "1"))
    except ValueError:
        template = 1
    ip = seen.ip or ""
    return PodRecord(
        name=str(metadata.get("name") or ""),
        pool=str(labels.get(codec.own("pool"), "")),
        role=role,
        agent_url=http_url(ip, agent_port) if ip else "",
        secret=secret,
        devices=devices,
        created_at=_created_at(metadata, codec),
        template_version=template,
        isolation=ISOLATION,
        annotations=codec.decode(annotations),
        alive=seen.alive and not deleting,
        address=ip,
    )

"""What the backend keeps of a pod: the fields `status.observe` and `records.to_record` read,
and nothing else. Pure.

At 10,000 pods the cache is most of the broker's heap, and the garbage collector walks every
container object (dict, list) in each generation it collects, holding the GIL throughout. A
pod as the API server sends it is about 60 such objects (spec, managedFields, every status
list); this projection is 7, with the labels, annotations and conditions kept as flat dicts of
strings, which CPython leaves untracked. With 10,000 pods on 2 cores, the tracked objects fell
from about 200,000 to 70,000 and the longest collection from 185 ms to 36 ms in an offline
replay; in `python -m firepool.bench kubernetes` (with paging by 500) the relist's peak RSS
fell from 738 MiB to 297 MiB and its longest GIL hold to 72-111 ms (docs/kubernetes.md).
"""

from __future__ import annotations

from typing import Any

_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
    "labels", "annotations",
)  # fmt: skip
_STATUS = ("phase", "reason", "message", "podIP")
_CONDITION = ("type", "status", "reason", "message")
_STATE = ("reason", "message", "exitCode")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _pick(source: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    found = _dict(source)
    return {k: found[k] for k in keys if k in found}


def _container_status(cs: dict[str, Any]) -> dict[str, Any]:
    state = _dict(cs.get("state"))
    kept: dict[str, Any] = {"name": cs.get("name"), "ready": cs.get("ready")}
    # A state is kept whenever it is there, even with none of its fields kept: its presence
    # alone says what the container is doing (`status.observe` reads it so).
    kept["state"] = {
        kind: _pick(detail, _STATE) for kind, detail in state.items() if isinstance(detail, dict)
    }
    return kept


def project(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the cache holds it (same shape as the API's JSON, fewer fields)."""
    metadata = _pick(pod.get("metadata"), _METADATA)
    spec = _dict(pod.get("spec"))
    raw_status = _dict(pod.get("status"))
    status = _pick(raw_status, _STATUS)
    conditions = raw_status.get("conditions")
    if isinstance(conditions, list):
        status["conditions"] = [_pick(c, _CONDITION) for c in conditions if isinstance(c, dict)]
    statuses = raw_status.get("containerStatuses")
    if isinstance(statuses, list):
        status["containerStatuses"] = [
            _container_status(cs) for cs in statuses if isinstance(cs, dict)
        ]
    kept: dict[str, Any] = {"metadata": metadata, "status": status}
    if "nodeName" in spec:
        kept["spec"] = {"nodeName": spec["nodeName"]}
    return kept

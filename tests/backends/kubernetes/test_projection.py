"""The cache's projection of a pod reads back exactly as the full pod does (status and the
broker's record), and stays a handful of objects for the garbage collector to walk."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from k8s_podjson import pod, running

from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.projection import project
from firepool.backends.kubernetes.records import to_record
from firepool.backends.kubernetes.status import Phase, observe

CODEC = AnnotationCodec("firepool.dev")
words = st.sampled_from(
    ["", "Unschedulable", "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError",
     "CrashLoopBackOff", "OOMKilled", "Evicted", "NodeLost", "NodeShutdown", "NodeAffinity",
     "NodeNotReady", "Terminated", "x"]
)  # fmt: skip
flags = st.sampled_from(["True", "False", "Unknown"])
condition = st.fixed_dictionaries(
    {"type": st.sampled_from(["PodScheduled", "Ready", "ContainersReady", "Initialized"]),
     "status": flags},
    optional={"reason": words, "message": st.text(max_size=8),
              "lastTransitionTime": st.just("2026-12-01T00:00:00Z")},
)  # fmt: skip
state_detail = st.fixed_dictionaries(
    {},
    optional={"reason": words, "message": st.text(max_size=8),
              "exitCode": st.integers(-1, 255), "startedAt": st.just("2026-12-01T00:00:00Z")},
)  # fmt: skip
container_status = st.fixed_dictionaries(
    {"name": st.just("agent"), "ready": st.booleans(),
     "state": st.dictionaries(st.sampled_from(["running", "waiting", "terminated"]),
                              state_detail, max_size=2)},
    optional={"restartCount": st.integers(0, 3), "image": st.just("firepool/base:0.1.0")},
)  # fmt: skip
annotations = st.dictionaries(
    st.sampled_from(
        ["firepool.dev/created-at", "firepool.dev/devices", "firepool.dev/template-version",
         "firepool.dev/state", "other.io/x"]
    ),
    st.sampled_from(["", "1", "2.5", "GPU-a,GPU-b", "{}", "x"]),
)  # fmt: skip

roles = st.dictionaries(
    st.just("firepool.dev/role"), st.sampled_from(["active", "standby", "bogus"])
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    built = pod(
        draw(st.sampled_from(["cpu-1", "gpu-0-sb"])),
        phase=draw(st.sampled_from(["Pending", "Running", "Failed", "Succeeded", "Unknown"])),
        node=draw(st.none() | st.just("node-1")),
        ip=draw(st.none() | st.sampled_from(["10.0.0.7", "fd00::7"])),
        rv=str(draw(st.integers(1, 99))),
        conditions=draw(st.none() | st.lists(condition, max_size=4)),
        containers=draw(st.none() | st.lists(container_status, max_size=2)),
        reason=draw(st.none() | words),
        message=draw(st.none() | st.text(max_size=8)),
        deleting=draw(st.booleans()),
        labels={"firepool.dev/pool": "cpu", **draw(roles)},
        annotations=draw(annotations),
    )
    # What the server adds and the backend never reads.
    built["metadata"]["managedFields"] = [{"manager": "kwok", "fieldsV1": {"f:status": {}}}]
    built["spec"]["tolerations"] = [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}]
    built["status"]["podIPs"] = [{"ip": "10.0.0.7"}]
    return built


@given(pods(), st.booleans())
def test_the_projection_reads_back_as_the_pod(full: dict[str, Any], deleted: bool) -> None:
    kept = project(full)
    assert observe(kept, deleted=deleted) == observe(full, deleted=deleted)
    record = {"secret": "s", "agent_port": 7070, "deleting": deleted}
    assert to_record(kept, CODEC, **record) == to_record(full, CODEC, **record)
    assert kept["metadata"]["resourceVersion"] == full["metadata"]["resourceVersion"]


def test_a_state_with_none_of_its_fields_kept_still_says_the_container_ended() -> None:
    """Found by the property above: a terminated state holding only `startedAt` was dropped
    from the projection (its kept fields were empty), so the cached pod read as Pending where
    the pod itself read as failed."""
    full = pod("cpu-1", phase="Pending", containers=[
        {"name": "agent", "ready": False,
         "state": {"terminated": {"startedAt": "2026-12-01T00:00:00Z"}}},
    ])  # fmt: skip
    kept = project(full)
    assert kept["status"]["containerStatuses"][0]["state"] == {"terminated": {}}
    assert observe(kept) == observe(full)
    assert observe(full).phase is Phase.FAILED


def tracked(value: Any) -> int:
    """Container objects the collector walks, in `value` and everything it holds."""
    inner: list[Any] = []
    if isinstance(value, dict):
        inner = list(value.values())
    elif isinstance(value, list | tuple):
        inner = list(value)
    return int(gc.is_tracked(value)) + sum(tracked(v) for v in inner)


def test_a_cached_pod_is_a_handful_of_objects_for_the_collector() -> None:
    full = running(annotations={"firepool.dev/created-at": "1.0"})
    full["metadata"]["managedFields"] = [
        {"manager": "kwok", "fieldsV1": {"f:status": {"f:conditions": {".": {}}}}}
    ]
    full["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    kept = project(full)
    assert tracked(kept) <= 7 < tracked(full)
    assert "managedFields" not in kept["metadata"] and "containers" not in kept.get("spec", {})

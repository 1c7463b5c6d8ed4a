"""What a pod's Kubernetes status means for the broker: one pure function, `observe`.

Kubernetes spreads a pod's fate over the phase, conditions, container states, the pod's
`reason` and its deletion timestamp. The broker needs fewer answers: still coming up, ready,
stalled (unschedulable, an image the kubelet cannot pull yet, a container it cannot create
yet), never going to run (an invalid image name, an image that may not be pulled), or gone
(failed, OOM-killed, evicted, deleted, its node lost). Each answer carries the Kubernetes
reason so logs and errors say why.

Stalled is not final: an autoscaler adds a node, a preemption or a terminating pod frees
room, a registry comes back, a missing ConfigMap is created, and the scheduler and kubelet
retry by themselves. The backend gives a stalled pod a bounded grace before it gives up
(`KubernetesSettings.stalled_grace_s`); treating the first sight as final would turn every
such moment into a create/delete loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Phase(StrEnum):
    PENDING = "pending"  # accepted, not yet scheduled or not yet started
    STARTING = "starting"  # scheduled and running, container not ready yet
    READY = "ready"  # container ready (agent health is checked by the backend)
    UNSCHEDULABLE = "unschedulable"  # the scheduler found no node (yet)
    IMAGE_FAILED = "image_failed"  # the image cannot be pulled (yet, or ever: see `terminal`)
    CONFIG_FAILED = "config_failed"  # the kubelet cannot create the container (yet)
    FAILED = "failed"  # the container ended: crashed, OOM-killed, evicted...
    LOST = "lost"  # deleted, or its node is gone


#: Waiting reasons about the image: the kubelet retries a pull, but an invalid name or an
#: image that the pull policy forbids to pull stays so for the pod's whole life.
_IMAGE_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
_PERMANENT_IMAGE_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
#: The kubelet retries these too (a Secret or ConfigMap created later fixes them).
_CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError"})
#: A node controller or the kubelet said the node is unreachable.
_NODE_LOST_REASONS = frozenset({"NodeLost", "NodeShutdown", "Terminated"})
_NODE_NOT_READY_REASONS = frozenset({"NodeNotReady", "NodeLost"})


@dataclass(frozen=True)
class Observed:
    phase: Phase
    reason: str = ""
    message: str = ""
    node: str | None = None
    ip: str | None = None

    @property
    def terminal(self) -> bool:
        """The pod will never (again) be ready."""
        if self.phase is Phase.IMAGE_FAILED:
            return self.reason in _PERMANENT_IMAGE_REASONS
        return self.phase in (Phase.FAILED, Phase.LOST)

    @property
    def stalled(self) -> bool:
        """Not coming up now, but the scheduler or kubelet keeps trying: final only after a
        grace period (the backend's)."""
        return not self.terminal and self.phase in (
            Phase.UNSCHEDULABLE, Phase.IMAGE_FAILED, Phase.CONFIG_FAILED,
        )  # fmt: skip

    @property
    def alive(self) -> bool:
        """The pod exists and may still serve: a stalled pod is alive (it keeps its budget)."""
        return not self.terminal


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def _container_statuses(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in status.get("containerStatuses") or [] if isinstance(c, dict)]


def observe(pod: dict[str, Any], *, deleted: bool = False) -> Observed:
    """The broker's view of a pod object (the API's JSON). `deleted`: a DELETED watch event."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    node = spec.get("nodeName") or None
    ip = status.get("podIP") or None

    def seen(phase: Phase, reason: str = "", message: str = "") -> Observed:
        return Observed(phase, reason, message, node, ip)

    if deleted:
        return seen(Phase.LOST, "Deleted", "the pod was deleted")
    if metadata.get("deletionTimestamp"):
        return seen(Phase.LOST, "Terminating", "the pod is being deleted")
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    message = status.get("message") or ""
    if reason == "Evicted":
        return seen(Phase.FAILED, "Evicted", message)
    if reason in _NODE_LOST_REASONS or reason == "NodeAffinity":
        return seen(Phase.LOST, reason, message)
    for cs in _container_statuses(status):
        # Present means in that state, whatever the detail holds (a terminated state with no
        # exit code yet is still a container that ended).
        terminated = (cs.get("state") or {}).get("terminated")
        if isinstance(terminated, dict):
            why = terminated.get("reason") or "Terminated"
            code = terminated.get("exitCode")
            text = terminated.get("message") or f"container exited with {code}"
            return seen(Phase.FAILED, why, text)
        waiting = (cs.get("state") or {}).get("waiting")
        if isinstance(waiting, dict):
            why = waiting.get("reason") or ""
            if why in _IMAGE_REASONS:
                return seen(Phase.IMAGE_FAILED, why, waiting.get("message") or "")
            if why in _CONFIG_REASONS:
                return seen(Phase.CONFIG_FAILED, why, waiting.get("message") or "")
            if why == "CrashLoopBackOff":
                return seen(Phase.FAILED, why, waiting.get("message") or "")
    if phase in ("Failed", "Succeeded"):
        return seen(Phase.FAILED, reason or phase, message)
    if phase == "Unknown":
        return seen(Phase.LOST, reason or "NodeLost", message or "the pod's node stopped reporting")
    conditions = _conditions(status)
    scheduled = conditions.get("PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        why = scheduled.get("reason") or ""
        if why == "Unschedulable":
            return seen(Phase.UNSCHEDULABLE, why, scheduled.get("message") or "")
        return seen(Phase.PENDING, why, scheduled.get("message") or "")
    ready = conditions.get("Ready")
    if ready and (
        ready.get("status") == "Unknown" or ready.get("reason") in _NODE_NOT_READY_REASONS
    ):
        # The node lifecycle controller marks every pod of an unreachable node this way.
        return seen(Phase.LOST, ready.get("reason") or "NodeLost", ready.get("message") or "")
    if phase == "Running":
        statuses = _container_statuses(status)
        if statuses and all(cs.get("ready") for cs in statuses):
            return seen(Phase.READY)
        return seen(Phase.STARTING, (ready or {}).get("reason") or "", "")
    return seen(Phase.PENDING, reason, message)


def node_lost(node: dict[str, Any]) -> bool:
    """A node whose Ready condition is Unknown (it stopped reporting) or that is being
    deleted: its pods are lost even before the API server says so about each one."""
    if (node.get("metadata") or {}).get("deletionTimestamp"):
        return True
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "Unknown"
    return False

"""The pod annotation codec: what a pod carries so that a restarted broker can trust it.

Pod annotations are authoritative for ownership (the broker paper's appendix A.1): state,
role, physical GPU, dedicated use (single-use, custom image), last caller, queue, lease tag,
hold expiry, the job a busy pod runs and what it retires after. Every backend stores them
as an opaque string map; only this module gives them meaning, in both directions.
"""

from __future__ import annotations

from collections.abc import Mapping

from firepool.control.admission import CreateOrder
from firepool.control.records import PodSnapshot, RetireReason, Ticket
from firepool.model import PodRole, PodState

_STATES = {
    "idle": PodState.IDLE,
    "held": PodState.HELD,
    "running": PodState.RUNNING,
    "starting": PodState.STARTING,
}


def starting(order: CreateOrder) -> dict[str, str]:
    """Written at create: a pod that never became ready is not trusted after a restart."""
    out = {"state": "starting", "role": order.role.value}
    if order.group is not None:
        out["group"] = order.group
    if order.single_use:
        out["single_use"] = "1"
    if order.image is not None:
        out["image"] = order.image
    return out


def idle() -> dict[str, str | None]:
    return {"state": "idle"}


def running(ticket: Ticket, retire_after: RetireReason | None) -> dict[str, str | None]:
    """Written once the attempt's RUNNING transition is durable (step 4 of the job path)."""
    spec = ticket.spec
    return {
        "state": "running",
        "job": ticket.job,
        "owner": ticket.caller,
        "queue": spec.queue,
        "tag": spec.lease_tag,
        "used": "1",
        "retire_after": retire_after.value if retire_after is not None else None,
    }


def held(until: float) -> dict[str, str | None]:
    """Written at release: the hold and its expiry survive a restart."""
    return {"state": "held", "hold_until": repr(until), "job": None}


def busy_job(annotations: Mapping[str, str]) -> str | None:
    """The job a pod is marked busy with, if any."""
    if annotations.get("state") != "running":
        return None
    return annotations.get("job") or None


def decode(
    name: str,
    pool: str,
    *,
    created_at: float,
    role: PodRole,
    template: int,
    annotations: Mapping[str, str],
    gpu: bool,
) -> PodSnapshot | None:
    """The pod as a restarted broker may trust it, or None (never ready, or unreadable)."""
    ann = annotations
    state = _STATES.get(ann.get("state", ""))
    if state is None or state is PodState.STARTING:
        return None  # never became ready: not worth trusting
    try:
        pod_role = PodRole(ann.get("role", role.value))
        hold_until = float(ann.get("hold_until", "0") or 0)
    except ValueError:
        return None
    busy = state is PodState.RUNNING
    return PodSnapshot(
        name=name,
        pool=pool,
        state=state,
        created_at=created_at,
        role=pod_role,
        group=ann.get("group") or (name if gpu else None),
        template=template,
        single_use=ann.get("single_use") == "1",
        image=ann.get("image") or None,
        owner=ann.get("owner"),
        queue=ann.get("queue"),
        tag=ann.get("tag"),
        used=ann.get("used") == "1",
        hold_until=hold_until,
        job=ann.get("job") if busy else None,
        retire_after=_retire_reason(ann.get("retire_after")) if busy else None,
    )


def _retire_reason(value: str | None) -> RetireReason | None:
    try:
        return None if value is None else RetireReason(value)
    except ValueError:
        return RetireReason.STALE_TEMPLATE  # unknown: do not trust the pod past its job

"""The per-GPU gate: at most one job runs on a physical GPU, and a standby on a busy card is
promoted only once the previous job's processes are gone (invariant 6).

Each card's `Group` names the one pod that holds its gate and at most one claimed pod waiting
behind it. A claim enters the gate (or queues behind it), a release or an unclaim leaves it,
and only a departure confirmed by the tracker hands it on. These functions change the group
record only; the tracker, which owns the pod indexes, re-buckets the pods they name. Kept
apart from the tracker so the rule reads in one place and has no index code around it.

No I/O and no clock.
"""

from __future__ import annotations

from firepool.control.records import Group


def gate_open(grp: Group, name: str) -> bool:
    """Whether pod `name` may be claimed on its card without queueing behind another
    claim: nobody waits for the gate, and it is free or already the pod's own."""
    if grp.waiting is not None:
        return False
    gate = grp.gate
    return gate is None or gate == name


def enter(grp: Group, name: str) -> bool:
    """A claim takes pod `name`: it takes the gate when the gate is free or its own (True:
    it becomes the card's active pod and may run), else it waits behind the holder (False)."""
    gate = grp.gate
    if gate is None or gate == name:
        grp.gate = name
        return True
    grp.waiting = name
    return False


def leave(grp: Group, name: str) -> str | None:
    """Pod `name` gives up its place (its job is over, or its claim was undone). Returns the
    pod that takes the gate now, if any: a waiting pod only when the holder itself leaves."""
    if grp.waiting == name:
        grp.waiting = None
        return None
    if grp.gate != name:
        return None
    grp.gate = None
    return hand_on(grp)


def hand_on(grp: Group) -> str | None:
    """The gate is free: the waiting pod, if any, takes it (and is returned)."""
    name = grp.waiting
    if name is None:
        return None
    grp.waiting = None
    grp.gate = name
    return name


def forget(grp: Group, name: str) -> str | None:
    """Pod `name` is deleted: it leaves the queue, and a gate it held passes on only now,
    when its processes are surely gone. Returns the pod that takes the gate, if any."""
    if grp.waiting == name:
        grp.waiting = None
    if grp.gate == name:
        grp.gate = None
        return hand_on(grp)
    return None

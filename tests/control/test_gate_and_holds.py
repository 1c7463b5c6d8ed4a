"""The per-GPU gate (control/gpu_gate.py) and the hold rule (control/holds.py) on their own,
with no tracker around them."""

from __future__ import annotations

from firepool.control import gpu_gate
from firepool.control.holds import HoldQueue, release_reason
from firepool.control.records import Group, Pod, RetireReason
from firepool.model import PodRole
from firepool.testing.control import cpu_pool


def test_a_claim_takes_a_free_gate_and_the_next_one_waits_until_the_holder_leaves() -> None:
    grp = Group("gpu-0", "p")
    assert gpu_gate.gate_open(grp, "a")
    assert gpu_gate.enter(grp, "a")
    assert gpu_gate.gate_open(grp, "a") and not gpu_gate.gate_open(grp, "b")
    assert not gpu_gate.enter(grp, "b")
    assert (grp.gate, grp.waiting) == ("a", "b")
    assert not gpu_gate.gate_open(grp, "a")  # someone waits: no third claim on this card
    assert gpu_gate.leave(grp, "b") is None  # the waiter's claim undone: the gate stays
    assert (grp.gate, grp.waiting) == ("a", None)
    assert not gpu_gate.enter(grp, "b")
    assert gpu_gate.leave(grp, "a") == "b"  # the holder leaves: the waiter takes the gate
    assert (grp.gate, grp.waiting) == ("b", None)
    assert gpu_gate.leave(grp, "x") is None


def test_a_deleted_holder_hands_the_gate_on_and_a_deleted_waiter_just_goes() -> None:
    grp = Group("gpu-0", "p")
    gpu_gate.enter(grp, "a")
    gpu_gate.enter(grp, "b")
    assert gpu_gate.forget(grp, "b") is None
    assert (grp.gate, grp.waiting) == ("a", None)
    gpu_gate.enter(grp, "b")
    assert gpu_gate.forget(grp, "a") == "b"
    assert gpu_gate.forget(grp, "b") is None
    assert (grp.gate, grp.waiting) == (None, None)


def _pod(*, template: int = 1, single_use: bool = False, image: str | None = None) -> Pod:
    return Pod(
        "pod-0",
        "p",
        role=PodRole.ACTIVE,
        group=None,
        created_at=0.0,
        template=template,
        single_use=single_use,
        image=image,
    )


def test_release_reason_holds_a_clean_pod_and_retires_the_ones_that_may_not_serve_twice() -> None:
    spec = cpu_pool("p")
    assert spec.hold_seconds > 0
    assert release_reason(_pod(), spec) is None
    assert release_reason(_pod(single_use=True), spec) is RetireReason.SINGLE_USE
    assert release_reason(_pod(image="repo/img:latest"), spec) is RetireReason.CUSTOM_IMAGE
    assert release_reason(_pod(image="repo/img@sha256:" + "0" * 64), spec) is None
    assert (
        release_reason(_pod(template=spec.template_version + 1), spec)
        is RetireReason.STALE_TEMPLATE
    )
    marked = _pod()
    marked.retire_after = RetireReason.SESSION_BOUNDARY
    assert release_reason(marked, spec) is RetireReason.SESSION_BOUNDARY


def test_the_hold_queue_yields_only_what_is_due_in_expiry_order() -> None:
    holds = HoldQueue()
    holds.add(30.0, "b")
    holds.add(10.0, "a")
    holds.add(50.0, "c")
    assert list(holds.due(5.0)) == []
    assert list(holds.due(30.0)) == [(10.0, "a"), (30.0, "b")]
    assert list(holds.due(100.0)) == [(50.0, "c")]

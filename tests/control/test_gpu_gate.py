"""The per-GPU gate (control/gpu_gate.py) on its own, with no tracker around it."""

from __future__ import annotations

from firepool.control import gpu_gate
from firepool.control.records import Group


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

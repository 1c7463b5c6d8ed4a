"""Rebuilding pods from their annotations: what a restarted broker trusts and what it drops."""

from __future__ import annotations

from firepool.backends.base import PodRecord
from firepool.control.records import Retired, RetireReason
from firepool.control.tracker import Tracker
from firepool.model import PodRole, PodState, PoolSpec
from firepool.service.recovery import snapshot


def record(name: str, **annotations: str) -> PodRecord:
    return PodRecord(
        name=name, pool="cpu", role=PodRole.ACTIVE, agent_url="http://127.0.0.1:1",
        secret="s" * 32, created_at=1.0, annotations=annotations,
    )  # fmt: skip


def test_a_recycled_pod_still_retires_after_its_job_across_a_restart() -> None:
    rec = record(
        "p", state="running", job="j", owner="alice", queue="default", tag="b", used="1",
        retire_after="session_boundary",
    )  # fmt: skip
    snap = snapshot(rec, gpu=False)
    assert snap is not None and snap.retire_after is RetireReason.SESSION_BOUNDARY
    tracker = Tracker([PoolSpec(name="cpu", idle_timeout=100)])
    tracker.restore(snap)
    assert tracker.release("j", 5.0).retired == [Retired("p", RetireReason.SESSION_BOUNDARY)]


def test_holds_are_restored_and_unready_pods_are_not_trusted() -> None:
    held = snapshot(
        record("h", state="held", owner="alice", queue="q", tag="t", used="1", hold_until="50.0"),
        gpu=False,
    )
    assert held is not None
    assert (held.state, held.owner, held.hold_until, held.job) == (
        PodState.HELD,
        "alice",
        50.0,
        None,
    )
    assert snapshot(record("s", state="starting"), gpu=False) is None
    assert snapshot(record("x"), gpu=False) is None
    gpu = snapshot(record("g", state="idle"), gpu=True)
    assert gpu is not None and gpu.group == "g"

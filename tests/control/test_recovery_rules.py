"""The recovery rules a restarted broker's driver used to decide itself, now the core's: the
probe's verdict on a RUNNING job (`control.recovery.reattach`), which GPUs a listing shows as
exclusively ours (`exclusive_groups`, through `BrokerCore.devices_listed`), and the hold of a
pod of an ended job reset after the restart (`BrokerCore.reset_then_held`)."""

from __future__ import annotations

from firepool.control.actions import Dispatch, HoldPod
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore
from firepool.control.records import PodSnapshot
from firepool.control.recovery import ProbeAnswer, exclusive_groups, reattach
from firepool.model import PodRole, PodState
from firepool.testing.control import cpu_pool, gpu_pool

KNOWS, UNKNOWN, SILENT = ProbeAnswer.KNOWS, ProbeAnswer.UNKNOWN, ProbeAnswer.SILENT


def test_an_attempt_every_rank_knows_is_reattached() -> None:
    assert reattach([KNOWS, KNOWS], agents_fence=False)
    assert reattach([KNOWS], agents_fence=True)


def test_a_rank_that_does_not_know_the_attempt_makes_it_lost_even_where_agents_fence() -> None:
    assert not reattach([KNOWS, UNKNOWN], agents_fence=True)
    assert not reattach([UNKNOWN, SILENT], agents_fence=True)


def test_a_silent_rank_is_reattached_only_where_agents_fence_themselves() -> None:
    assert reattach([KNOWS, SILENT], agents_fence=True)
    assert not reattach([KNOWS, SILENT], agents_fence=False)


def test_a_card_shared_with_a_pod_outside_its_group_stays_closed() -> None:
    devices = {"a0": ["gpu0"], "a1": ["gpu0"], "b0": ["gpu1"], "stranger": ["gpu1"],
               "c0": []}  # fmt: skip
    unverified = {"a": ["a0", "a1"], "b": ["b0"], "c": ["c0"], "gone": ["g0"]}
    # a: its card is its own; b: shared with a pod not of the group; c and gone: no devices
    assert exclusive_groups(unverified, devices) == ["a"]


def _restarted_gpu_core() -> BrokerCore:
    spec = gpu_pool(name="gpu", standbys_per_active=1)
    core = BrokerCore([spec], BudgetLedger({"H200": 8}), new_name=lambda pool: "x",
                      config=None)  # fmt: skip
    for name, role in (("a0", PodRole.ACTIVE), ("a1", PodRole.STANDBY)):
        core.restore_pod(PodSnapshot(name, "gpu", PodState.IDLE, 1.0, role=role, group="a"))
    core.restore_pod(PodSnapshot("b0", "gpu", PodState.IDLE, 1.0, group="b"))
    return core


def test_a_listing_opens_the_cards_it_shows_exclusive_and_only_those() -> None:
    core = _restarted_gpu_core()
    assert core.tracker.unverified == {"a", "b"}
    listing = {"a0": ["gpu0"], "a1": ["gpu0"], "b0": ["gpu1"], "other": ["gpu1"]}
    assert core.devices_listed(listing, 5.0) == [Dispatch()]
    assert core.tracker.unverified == {"b"}
    assert core.devices_listed(listing, 6.0) == []  # nothing new opens: no wake-up
    assert core.tracker.unverified == {"b"}


def test_a_pod_reset_after_the_restart_is_held_for_its_session() -> None:
    core = BrokerCore([cpu_pool(name="cpu", idle_timeout=100)], BudgetLedger(),
                      new_name=lambda pool: "x", config=None)  # fmt: skip
    held = PodSnapshot("p1", "cpu", PodState.HELD, 1.0, owner="alice", queue="q", tag="t",
                       used=True, hold_until=40.0)  # fmt: skip
    assert core.reset_then_held(held, 10.0) == [HoldPod("p1", 40.0)]
    pod = core.tracker.get("p1")
    assert pod is not None and (pod.state, pod.owner) == (PodState.HELD, "alice")

"""Every pod phase and condition the broker must tell apart, from real-shaped pod JSON."""

from __future__ import annotations

import pytest
from k8s_podjson import pod, running

from firepool.backends.kubernetes.status import Phase, node_lost, observe


def test_pending_before_scheduling() -> None:
    seen = observe(pod())
    assert seen.phase is Phase.PENDING and seen.alive and not seen.terminal


def test_unschedulable_is_terminal_with_the_schedulers_message() -> None:
    seen = observe(
        pod(
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                }
            ]
        )
    )
    # Not final: an autoscaler, a preemption or a terminating pod may make room.
    assert seen.phase is Phase.UNSCHEDULABLE and seen.stalled and not seen.terminal
    assert "Insufficient nvidia.com/gpu" in seen.message


def test_scheduling_gated_is_still_pending() -> None:
    seen = observe(
        pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}])
    )
    assert seen.phase is Phase.PENDING


@pytest.mark.parametrize(
    ("reason", "final"),
    [
        ("ErrImagePull", False),  # the kubelet pulls again: a registry blip heals
        ("ImagePullBackOff", False),
        ("InvalidImageName", True),  # no retry can fix the name
        ("ErrImageNeverPull", True),  # pullPolicy Never and the image is not on the node
    ],
)
def test_image_pull_failures(reason: str, final: bool) -> None:
    seen = observe(
        pod(
            node="n1",
            containers=[{"name": "agent", "state": {"waiting": {"reason": reason}}}],
        )
    )
    assert seen.phase is Phase.IMAGE_FAILED and seen.reason == reason
    assert (seen.terminal, seen.stalled) == (final, not final)


def test_container_creating_is_starting_or_pending() -> None:
    seen = observe(
        pod(
            node="n1",
            containers=[{"name": "agent", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        )
    )
    assert seen.phase is Phase.PENDING and seen.alive


def test_running_not_ready_is_starting() -> None:
    assert observe(running(ready=False)).phase is Phase.STARTING


def test_running_and_ready() -> None:
    seen = observe(running())
    assert seen.phase is Phase.READY and seen.ip == "10.0.0.7" and seen.node == "node-1"


def test_oom_killed() -> None:
    seen = observe(
        pod(
            phase="Failed",
            node="n1",
            containers=[
                {
                    "name": "agent",
                    "ready": False,
                    "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                }
            ],
        )
    )
    assert seen.phase is Phase.FAILED and seen.reason == "OOMKilled" and not seen.alive


def test_oom_killed_while_phase_still_running() -> None:
    """The container status says it before the phase does."""
    seen = observe(
        pod(
            phase="Running",
            node="n1",
            containers=[
                {"name": "agent", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
            ],
        )
    )
    assert seen.phase is Phase.FAILED and seen.reason == "OOMKilled"


def test_evicted() -> None:
    seen = observe(
        pod(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    )
    assert seen.phase is Phase.FAILED and seen.reason == "Evicted" and "memory" in seen.message


def test_deleted_event() -> None:
    seen = observe(running(), deleted=True)
    assert seen.phase is Phase.LOST and seen.reason == "Deleted"


def test_terminating() -> None:
    seen = observe(running(deleting=True))
    assert seen.phase is Phase.LOST and not seen.alive


@pytest.mark.parametrize("reason", ["NodeLost", "NodeShutdown"])
def test_node_lost_by_pod_reason(reason: str) -> None:
    assert observe(pod(phase="Failed", reason=reason)).phase is Phase.LOST


def test_node_lost_by_phase_unknown() -> None:
    assert observe(pod(phase="Unknown", node="n1")).phase is Phase.LOST


def test_node_not_ready_marks_ready_condition() -> None:
    obj = running()
    obj["status"]["conditions"][1] = {"type": "Ready", "status": "False", "reason": "NodeNotReady"}
    seen = observe(obj)
    assert seen.phase is Phase.LOST and seen.reason == "NodeNotReady"


def test_ready_unknown_is_lost() -> None:
    obj = running()
    obj["status"]["conditions"][1] = {"type": "Ready", "status": "Unknown"}
    assert observe(obj).phase is Phase.LOST


def test_crash_loop_fails_and_a_config_error_stalls() -> None:
    """A crash loop is the agent's own failure; a missing Secret or ConfigMap the kubelet
    retries on its own (it may be created a moment later), so it only stalls the pod."""
    expected = {"CrashLoopBackOff": Phase.FAILED, "CreateContainerConfigError": Phase.CONFIG_FAILED}
    for reason, phase in expected.items():
        seen = observe(
            pod(
                node="n1",
                containers=[{"name": "agent", "state": {"waiting": {"reason": reason}}}],
            )
        )
        assert seen.phase is phase and seen.reason == reason
        assert seen.terminal is (phase is Phase.FAILED)


def test_succeeded_counts_as_failed() -> None:
    """An agent that exits 0 is still a pod that is gone."""
    assert observe(pod(phase="Succeeded")).phase is Phase.FAILED


def test_node_lost_helper() -> None:
    ok = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    silent = {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    going = {"metadata": {"deletionTimestamp": "x"}, "status": {}}
    assert not node_lost(ok) and node_lost(silent) and node_lost(going)


def test_empty_object_is_pending() -> None:
    assert observe({}).phase is Phase.PENDING

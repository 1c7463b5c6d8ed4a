"""Readiness from watch events: `wait_ready`'s state machine fed the events a watch delivers
(the I/O around it is exercised by `make test-k8s`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from k8s_podjson import pod, running

from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.backend import kept_pod
from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.errors import (
    BackendError,
    ImagePullError,
    PodFailedError,
    PodUnschedulableError,
)
from firepool.backends.kubernetes.status import Phase

LABELS = {"firepool.dev/pool": "cpu", "firepool.dev/role": "active"}


def ours(make: Callable[..., dict[str, Any]], name: str, **kw: Any) -> dict[str, Any]:
    return make(name, labels=dict(LABELS), **kw)


def drive(
    events: list[tuple[str, dict[str, Any]]], timeout: float = 5.0, stalled_grace_s: float = 0.2
) -> Any:
    """Wait for `p` while the events arrive one by one, as the watch thread hands them over."""
    backend = KubernetesBackend(KubernetesSettings(stalled_grace_s=stalled_grace_s))
    backend._stall_detail = _no_events  # type: ignore[method-assign]
    backend._on_list([ours(pod, "p", rv="1")], "1")

    async def go() -> Any:
        async def feed() -> None:
            for kind, obj in events:
                await asyncio.sleep(0.01)
                backend._on_event(kind, obj)

        feeder = asyncio.create_task(feed())
        try:
            return await backend._observed("p", time.monotonic() + timeout)
        finally:
            await feeder

    return asyncio.run(go())


def test_ready_after_scheduling_and_start() -> None:
    seen = drive(
        [
            ("MODIFIED", ours(pod, "p", rv="2", node="n1")),
            ("MODIFIED", ours(running, "p", rv="3", ready=False)),
            ("MODIFIED", ours(running, "p", rv="4")),
        ]
    )
    assert seen.phase is Phase.READY and seen.ip == "10.0.0.7"


async def _no_events(name: str, seen: Any) -> str:
    return seen.message or seen.reason


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def test_unschedulable_ends_the_wait_once_its_grace_is_over() -> None:
    started = time.monotonic()
    with pytest.raises(PodUnschedulableError) as err:
        drive([("MODIFIED", ours(pod, "p", rv="2", conditions=[UNSCHEDULABLE]))])
    assert err.value.field == "pool"
    assert time.monotonic() - started >= 0.2


def test_unschedulable_then_scheduled_is_ready() -> None:
    """Room made within the grace (an autoscaler's node, a preempted pod): the same pod."""
    seen = drive(
        [
            ("MODIFIED", ours(pod, "p", rv="2", conditions=[UNSCHEDULABLE])),
            ("MODIFIED", ours(pod, "p", rv="3", node="n1")),
            ("MODIFIED", ours(running, "p", rv="4")),
        ],
        stalled_grace_s=5.0,
    )
    assert seen.phase is Phase.READY


def test_image_pull_back_off_ends_the_wait_once_its_grace_is_over() -> None:
    waiting = {"name": "agent", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
    with pytest.raises(ImagePullError) as err:
        drive([("MODIFIED", ours(pod, "p", rv="2", node="n1", containers=[waiting]))])
    assert err.value.field == "image"


def test_deleted_while_starting_ends_the_wait_at_that_event() -> None:
    with pytest.raises(PodFailedError) as err:
        drive([("DELETED", ours(pod, "p", rv="2"))])
    assert "Deleted" in err.value.message


def test_oom_killed_ends_the_wait() -> None:
    dead = {"name": "agent", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
    with pytest.raises(PodFailedError) as err:
        drive([("MODIFIED", ours(pod, "p", rv="2", phase="Failed", containers=[dead]))])
    assert "OOMKilled" in err.value.message


def test_timeout_is_a_backend_error_saying_where_it_was() -> None:
    with pytest.raises(BackendError) as err:
        drive([], timeout=0.2)
    assert "pending" in err.value.message


def test_relist_without_the_pod_means_lost() -> None:
    backend = KubernetesBackend(KubernetesSettings())
    backend._on_list([ours(pod, "p", rv="1")], "1")

    async def go() -> None:
        asyncio.get_running_loop().call_later(0.05, backend._on_list, [], "9")
        await backend._observed("p", time.monotonic() + 5)

    with pytest.raises(PodFailedError):
        asyncio.run(go())
    assert "p" not in backend.cache.pods and "p" in backend.cache.gone


def test_foreign_pods_are_not_adopted_and_ours_are_kept_slim() -> None:
    """What the watch thread keeps of each listed pod, page by page, before the cache."""
    keep = kept_pod(AnnotationCodec(KubernetesSettings().prefix))
    mine = ours(pod, "p")
    mine["metadata"]["managedFields"] = [{"manager": "kwok", "fieldsV1": {"f:status": {}}}]
    kept = [k for k in map(keep, [pod("web-1", labels={"app": "web"}), mine]) if k is not None]
    assert [k["metadata"]["name"] for k in kept] == ["p"]
    assert "managedFields" not in kept[0]["metadata"]


def test_a_closed_backend_refuses_calls() -> None:
    backend = KubernetesBackend(KubernetesSettings())

    async def go() -> None:
        await backend.close()
        with pytest.raises(BackendError):
            await backend.list_pods()

    asyncio.run(go())

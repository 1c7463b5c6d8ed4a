"""The hold rule and queue (control/holds.py) on their own, with no tracker around them."""

from __future__ import annotations

from firepool.control.holds import HoldQueue, release_reason
from firepool.control.records import Pod, RetireReason
from firepool.model import PodRole
from firepool.testing.control import cpu_pool


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

"""The simulator applies the API's image rule (control/images.py) and the tracker's image
claims in virtual time: a tag runs on a single-use pod each time, a pinned image is reused
by its session, and an image the pool does not admit is refused before it is queued."""

from __future__ import annotations

import random

import pytest

from firepool.model import ImageNotAllowedError
from firepool.sim.broker import JobRequest, SimBroker
from firepool.sim.loop import EventLoop
from firepool.sim.venue import PRESETS
from firepool.testing.control import cpu_pool

PINNED = "local/ml@sha256:" + "7" * 64


def test_the_simulator_admits_claims_and_refuses_images_like_the_service() -> None:
    loop = EventLoop()
    spec = cpu_pool(max_count=4, idle_timeout=600.0, allowed_images=("local/ml",))
    broker = SimBroker(loop, PRESETS["production-cpu"], [spec], {"cpu": 4}, random.Random(0))
    with pytest.raises(ImageNotAllowedError):
        broker.submit(JobRequest("alice", "cpu", 1.0, image="docker.io/other:1"))
    for image in ("local/ml:v1", "local/ml:v1", PINNED, PINNED):
        broker.submit(JobRequest("alice", "cpu", 1.0, tag="s", image=image))
        loop.run(until=loop.now + 600.0)
    done = broker.finished()
    assert len(done) == 4
    assert all(st.paths == ("custom_image",) for st in done)
    # Tags: never the same pod twice (deleted after the job). Pinned: reused in its session.
    assert [st.reasons[0] for st in done] == [
        "custom_image", "custom_image", "custom_image", "same_session",
    ]  # fmt: skip
    broker.tracker.check_invariants()

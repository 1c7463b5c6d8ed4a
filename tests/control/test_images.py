"""The image allowlist rule (control/images.py) and the reference helpers it rests on."""

from __future__ import annotations

from typing import Any

import pytest

from firepool.control.images import check_image, image_allowed
from firepool.control.records import Wait
from firepool.control.tracker import Tracker
from firepool.model import (
    AcquisitionPath,
    ConfigError,
    ImageNotAllowedError,
    PodState,
    PoolSpec,
    image_is_pinned,
    image_repository,
)
from firepool.testing.control import cpu_pool, lease, ready_pods, request, run_job

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
POOL = cpu_pool(
    allowed_images=("registry.local:5000/team", f"ghcr.io/org/trainer@{D1}")
)


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("registry.local:5000/team", True),  # the repository itself, untagged
        ("registry.local:5000/team:v1", True),
        ("registry.local:5000/team/trainer:latest", True),  # below it, on a path boundary
        (f"registry.local:5000/team/deep/er@{D2}", True),
        ("registry.local:5000/team-evil:v1", False),  # a longer name is not below it
        ("registry.local:5001/team:v1", False),
        (f"ghcr.io/org/trainer@{D1}", True),  # the exact pinned image
        (f"ghcr.io/org/trainer:v1@{D1}", True),  # the same image, with a tag as a label
        (f"ghcr.io/org/other@{D1}", False),  # the digest in another repository
        (f"ghcr.io/org/trainer@{D2}", False),  # another digest of the same repository
        ("ghcr.io/org/trainer:v1", False),  # its tag may move: not the pinned image
        ("ghcr.io/org/trainer", False),
    ],
)
def test_prefixes_admit_a_repository_tree_and_digests_one_image(image: str, allowed: bool) -> None:
    assert image_allowed(POOL, image) is allowed


def test_a_refusal_is_typed_and_names_the_allowlist() -> None:
    check_image(POOL, None)  # the pool's own image always passes
    check_image(POOL, "registry.local:5000/team:v1")
    with pytest.raises(ImageNotAllowedError) as err:
        check_image(POOL, "docker.io/evil:latest")
    assert err.value.field == "image" and "registry.local:5000/team" in err.value.message
    with pytest.raises(ImageNotAllowedError, match="admits no custom images"):
        check_image(cpu_pool("plain"), "registry.local:5000/team:v1")


def test_reference_helpers() -> None:
    assert image_is_pinned(f"a/b@{D1}") and image_is_pinned(f"a/b:t@{D1}")
    assert not image_is_pinned("a/b:latest") and not image_is_pinned("a/b@sha256:12")
    assert image_repository("host:5000/a/b:v1") == "host:5000/a/b"
    assert image_repository(f"host:5000/a/b@{D1}") == "host:5000/a/b"
    assert image_repository("host:5000/a") == "host:5000/a"


@pytest.mark.parametrize(
    "entry", ["", "trainer:v1", "bad ref", "a@sha256:12", "UPPER case"]
)
def test_bad_allowlist_entries_are_config_errors_naming_the_entry(entry: str) -> None:
    with pytest.raises(ConfigError) as err:
        PoolSpec(name="cpu", allowed_images=("ok/repo", entry))
    assert err.value.field == "allowed_images.1"


PINNED = f"repo/img@{D1}"


@pytest.mark.parametrize(
    "outside",
    [
        {"caller": "bob"},
        {"queue": "other"},
        {"tag": "other"},
        {"image": f"repo/img@{D2}"},
        {"image": None, "image_pinned": False},  # the pool's own image
        {"pool": "cpu2"},
    ],
)
def test_a_held_pinned_pod_serves_only_its_fence(outside: dict[str, Any]) -> None:
    """Caller, pool, queue, lease tag and digest fence a reusable custom-image pod."""
    tracker = Tracker([cpu_pool(idle_timeout=100), cpu_pool("cpu2", idle_timeout=100)])
    tracker.add_pod("p", "cpu", 0.0, image=PINNED)
    tracker.pod_ready("p", 0.0)
    ready_pods(tracker, "cpu2", 1)
    fence: dict[str, Any] = {"tag": "s", "image": PINNED, "image_pinned": True}
    run_job(tracker, request("j1", **fence), 1.0)
    held = tracker.get("p")
    assert held is not None and held.state is PodState.HELD
    got = tracker.claim(request("j2", **{**fence, **outside}), 2.0)
    assert isinstance(got, Wait) or all(p.name != "p" for p in got.pods)
    inside = tracker.claim(request("j3", **fence), 3.0)
    assert [(p.name, p.path) for p in lease(inside).pods] == [
        ("p", AcquisitionPath.CUSTOM_IMAGE)
    ]

"""Image names are stored in the form the kubelet looks up, or refused."""

from __future__ import annotations

import pytest

from firepool.image import ImageError
from firepool.image.reference import parse_reference


@pytest.mark.parametrize(
    ("name", "full", "tag"),
    [
        ("firepool/base:0.1.0", "docker.io/firepool/base:0.1.0", "0.1.0"),
        ("pause", "docker.io/library/pause:latest", "latest"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10", "3.10"),
        ("localhost:5000/fp/base", "localhost:5000/fp/base:latest", "latest"),
        ("localhost/fp:dev", "localhost/fp:dev", "dev"),
    ],
)
def test_names_are_normalised(name: str, full: str, tag: str) -> None:
    reference = parse_reference(name)
    assert (reference.full, reference.tag) == (full, tag)


@pytest.mark.parametrize(
    "name", ["Firepool/base:1", "firepool/base@sha256:" + "0" * 64, "fp/base:-x", "fp//base"]
)
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ImageError) as caught:
        parse_reference(name)
    assert caught.value.field == "name"

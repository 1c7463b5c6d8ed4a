"""Broker annotations survive a trip through Kubernetes metadata exactly."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.model import ConfigError

CODEC = AnnotationCodec("firepool.dev")
_K8S_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def test_plain_keys_are_readable() -> None:
    assert CODEC.encode({"owner": "alice"}) == {"b.firepool.dev/owner": "alice"}


def test_the_broker_keys_round_trip() -> None:
    ann = {
        "state": "held",
        "role": "standby",
        "group": "h100-1f2e",
        "owner": "team-a/alice",
        "queue": "default",
        "tag": "session 1 ✓",
        "used": "1",
        "hold_until": "1764543600.5",
        "job": "j-123",
        "retire_after": "stale_template",
        "firepool.io/marker": "pod.abcdef",
        "": "empty values stay",
    }
    ann.pop("")
    assert CODEC.decode(CODEC.encode(ann)) == ann


def test_foreign_annotations_are_ignored() -> None:
    meta = {"kubectl.kubernetes.io/last-applied-configuration": "{}", "firepool.dev/devices": "x"}
    assert CODEC.decode({**meta, **CODEC.encode({"a": "b"})}) == {"a": "b"}


def test_patch_removes_with_none() -> None:
    assert CODEC.patch({"owner": None, "state": "idle"}) == {
        "b.firepool.dev/owner": None,
        "b.firepool.dev/state": "idle",
    }


def test_too_long_key_is_a_typed_error() -> None:
    with pytest.raises(ConfigError) as err:
        CODEC.encode({"x/" + "k" * 60: "v"})
    assert err.value.field is not None and err.value.field.startswith("annotations.")


keys = st.text(min_size=1, max_size=38)


@given(st.dictionaries(keys, st.text(max_size=200), max_size=12))
def test_any_short_keys_round_trip(ann: dict[str, str]) -> None:
    try:
        encoded = CODEC.encode(ann)
    except ConfigError:
        return  # keys whose UTF-8 is too long are refused, never mangled
    for name in encoded:
        prefix, _, short = name.partition("/")
        assert prefix == "b.firepool.dev" and _K8S_NAME.match(short), name
    assert CODEC.decode(encoded) == ann


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=38))
def test_ascii_keys_up_to_38_always_fit(key: str) -> None:
    assert CODEC.decode(CODEC.encode({key: "v"})) == {key: "v"}

"""The broker learns how long a backend's agents bear its silence from the backend's
capabilities, never from the backend's type or a private attribute."""

from __future__ import annotations

from typing import Literal

from firepool.backends.base import MIN_BROKER_SILENCE_S, BackendCapabilities
from firepool.testing.control import cpu_pool


def caps(fence: float | Literal["keep-alive"] | None) -> BackendCapabilities:
    return BackendCapabilities(
        name="test",
        private_scratch=False,
        device_discovery="none",
        shared_devices=False,
        durable_state=True,
        memory_limit="none",
        agent_fence=fence,
    )


def test_agents_that_never_fence_bear_any_silence() -> None:
    assert caps(None).broker_silence_s(cpu_pool()) is None


def test_keep_alive_fence_follows_the_pool_with_a_floor() -> None:
    long = cpu_pool("long", idle_timeout=600)
    short = cpu_pool("short", idle_timeout=1)
    assert caps("keep-alive").broker_silence_s(long) == 600
    assert caps("keep-alive").broker_silence_s(short) == MIN_BROKER_SILENCE_S


def test_a_fixed_fence_is_the_same_for_every_pool() -> None:
    assert caps(7).broker_silence_s(cpu_pool()) == 7.0

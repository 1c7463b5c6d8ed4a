"""The keep-alive interval: a quarter of the shortest tolerated silence, with a floor."""

from __future__ import annotations

from firepool.control.keepalive import MIN_KEEPALIVE_S, keepalive_interval


def test_a_quarter_of_the_shortest_bound_with_pools_that_never_fence_left_out() -> None:
    assert keepalive_interval([8.0, None, 2.0]) == 0.5


def test_no_bound_needs_no_keepalive_and_a_tiny_one_gets_the_floor() -> None:
    assert keepalive_interval([None, None]) is None
    assert keepalive_interval([]) is None
    assert keepalive_interval([0.01]) == MIN_KEEPALIVE_S

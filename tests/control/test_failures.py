"""The one failure stream: fixed by its seed, the same for every policy and driver, at the
rate asked for, on slot boundaries, and bad parameters are typed errors."""

from __future__ import annotations

import pytest

from firepool.control.failures import Failure, fails, failures_between, job_key
from firepool.model import RequestValidationError

LIVE = [(f"job-{i}", 1) for i in range(20_000)]


def test_the_stream_is_seeded_and_has_the_asked_rate() -> None:
    a = failures_between(LIVE, 100.0, 160.0, seed=7, rate=0.1, slot_s=60.0)
    assert a == failures_between(LIVE, 100.0, 160.0, seed=7, rate=0.1, slot_s=60.0)
    assert a != failures_between(LIVE, 100.0, 160.0, seed=8, rate=0.1, slot_s=60.0)
    assert len(a) / len(LIVE) == pytest.approx(0.1, abs=0.006)  # one boundary (120 s)
    assert {f.at for f in a} == {120.0}


def test_each_attempt_fails_at_most_once_a_window_at_its_first_failing_slot() -> None:
    window = failures_between(LIVE[:2000], 0.0, 600.0, seed=3, rate=0.3, slot_s=60.0)
    assert len({f.job_id for f in window}) == len(window)
    for f in window[:50]:
        key = job_key(f.job_id)
        slot = int(f.at // 60.0)
        assert fails(3, key, slot, 0.3)
        assert not any(fails(3, key, s, 0.3) for s in range(1, slot))


def test_nothing_fails_at_rate_zero_or_in_an_empty_window() -> None:
    assert failures_between(LIVE, 0.0, 600.0, seed=1, rate=0.0, slot_s=60.0) == []
    assert failures_between(LIVE, 60.0, 60.0, seed=1, rate=1.0, slot_s=60.0) == []
    assert failures_between([("j", 2)], 0.0, 60.0, seed=1, rate=1.0, slot_s=60.0) == [
        Failure("j", 2, 60.0)
    ]


@pytest.mark.parametrize(("rate", "slot", "field"), [
    (1.5, 60.0, "failure_rate"), (-0.1, 60.0, "failure_rate"), (float("nan"), 60.0,
    "failure_rate"), (0.1, 0.0, "slot_s"), (0.1, float("inf"), "slot_s"),
])
def test_bad_parameters_are_typed_errors(rate: float, slot: float, field: str) -> None:
    with pytest.raises(RequestValidationError) as err:
        failures_between(LIVE[:1], 0.0, 60.0, seed=1, rate=rate, slot_s=slot)
    assert err.value.field == field

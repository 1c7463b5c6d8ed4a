"""OAK's score pieces at their boundaries, and the exact refusal of every bad knob (see
docs/testing.md, "Mutation testing"). Only the public functions are used."""

from __future__ import annotations

import math

import pytest

from firepool.scheduling import OakParams, age_key, aggregate_restart_factor, restart_factor
from firepool.scheduling.errors import InvalidRoundInputError


def test_the_paper_defaults_and_the_lowest_legal_knobs_are_accepted() -> None:
    assert OakParams() == OakParams(p=0.5, alpha=0.01, k_max=100.0, mu_na=1.1)
    edge = OakParams(p=0.0, alpha=0.0, k_max=1.0, mu_na=0.0)  # every bound is inclusive
    assert (edge.p, edge.alpha, edge.k_max, edge.mu_na) == (0.0, 0.0, 1.0, 0.0)
    assert OakParams(mu_na=0.5).mu_na == 0.5  # below 1 is fine for the idle term
    assert OakParams(k_max=1.5).k_max == 1.5


@pytest.mark.parametrize("knob", ["p", "alpha", "k_max", "mu_na"])
@pytest.mark.parametrize("bad", [-0.5, math.inf, math.nan], ids=["negative", "inf", "nan"])
def test_each_bad_knob_is_refused_naming_itself(knob: str, bad: float) -> None:
    bound = "1" if knob == "k_max" else "0"
    with pytest.raises(InvalidRoundInputError) as err:
        OakParams(**{knob: bad})
    assert err.value.field == knob
    assert err.value.message == f"{knob} must be finite and >= {bound}"


def test_k_max_below_one_is_refused() -> None:
    with pytest.raises(InvalidRoundInputError) as err:
        OakParams(k_max=0.99)
    assert err.value.field == "k_max"


def test_the_age_key_reaches_k_max_exactly_at_the_cap() -> None:
    # exp(log(100)) is 100.00000000000004 in floating point: at the cap the key is K_max itself.
    assert age_key(math.log(100.0), alpha=1.0, k_max=100.0) == 100.0
    assert age_key(-5.0, alpha=0.01, k_max=100.0) == 1.0  # a negative wait counts as none
    assert age_key(10.0, alpha=0.01, k_max=100.0) == math.exp(0.1)


def test_restart_factor_edges() -> None:
    # Progress under one second still counts as progress.
    assert restart_factor(0.5, 0.0, 0.5, age_s=100.0) == 0.5
    # A job exactly one restart penalty old is protected no more.
    assert restart_factor(100.0, 50.0, 50.0, age_s=50.0) == 0.5
    assert restart_factor(100.0, 50.0, 50.0, age_s=49.9) == 1.0
    assert restart_factor(0.0, 50.0, 50.0, age_s=1000.0) == 1.0


def test_aggregate_restart_factor_edges() -> None:
    assert aggregate_restart_factor(49.9, 3, 50.0) == 1.0  # younger than P: exactly one
    assert aggregate_restart_factor(50.0, 0, 50.0) == 0.5  # exactly P old: A / (A + P)
    assert aggregate_restart_factor(150.0, 1, 50.0) == 0.5  # (150 - 50) / 200
    assert aggregate_restart_factor(100.0, 5, 50.0) == 0.0  # never negative

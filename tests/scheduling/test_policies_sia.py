"""Sia's two faithful modes, OAK's named choices and Lookahead on instances solved by hand.

Instance 1: 4 GPUs; job A scales perfectly (goodput 1, 2, 4 on 1, 2, 4 GPUs) and job B hardly
(1, 1.1, 1.2); both idle, age 0 (so no restart factor). Scores, rounded to 2 decimals:

    p = +0.5:  A 1.00 1.41 2.00   B 1.00 1.05 1.10
    p = -0.5:  A 1.00 0.71 0.50   B 1.00 0.95 0.91

"sia" (maximise, idle -1): A2+B2 = 2.46 beats A4 alone = 2.00 - 1 = 1.00 and A2+B1 = 2.41.
"sia-reference" (minimise, idle +1.1): A4 alone = 0.50 + 1.1 = 1.60 beats A2+B2 = 1.66,
A2+B1 = 1.71, both at 1 = 2.00 and B4 alone = 2.01. So the shipped mode idles B where the OAK
paper's mode shares. (The old project Sia rewarded idling with +1.1: A4 alone = 3.10 > 2.46.)
"""

from __future__ import annotations

import math

import pytest

from firepool.scheduling import (
    SIA_PAPER,
    SIA_REFERENCE,
    Configuration,
    JobRoundState,
    OakParams,
    OakPolicy,
    RoundInput,
    SiaParams,
    SiaPolicy,
    make_policy,
)
from firepool.scheduling.errors import InvalidRoundInputError
from firepool.scheduling.policies import sia as sia_module
from firepool.scheduling.policies.lookahead import (
    LookaheadParams,
    LookaheadPolicy,
    failure_rate,
)
from firepool.scheduling.prepare import prepare

ONE, TWO, THREE, FOUR = (Configuration("V100", n, 1) for n in (1, 2, 3, 4))


def job(job_id: str, goodputs: tuple[float, ...], **kw: object) -> JobRoundState:
    cfgs = (ONE, TWO, FOUR) if len(goodputs) == 3 else (ONE, TWO, THREE, FOUR)
    return JobRoundState(job_id, cfgs, goodputs, app="cifar10", **kw)  # type: ignore[arg-type]


def instance(a: JobRoundState | None = None, scale: float = 1.0) -> RoundInput:
    a = a or job("A", (1.0 * scale, 2.0 * scale, 4.0 * scale))
    return RoundInput({"V100": 4}, (a, job("B", (1.0, 1.1, 1.2))))


def test_paper_mode_shares_and_its_objective_is_the_hand_computed_optimum() -> None:
    out = make_policy("sia").decide(instance())
    assert out.assignments == {"A": TWO, "B": TWO}
    assert out.objective == pytest.approx(1.41 + 1.05)


def test_reference_mode_idles_the_poor_scaler_and_minimises_the_hand_objective() -> None:
    out = make_policy("sia-reference").decide(instance())
    assert out.assignments == {"A": FOUR, "B": None}
    assert out.objective == pytest.approx(0.50 + 1.1)


def test_goodputs_are_normalised_to_the_smallest_configuration() -> None:
    for mode in ("sia", "sia-reference"):
        plain = make_policy(mode).decide(instance())
        scaled = make_policy(mode).decide(instance(scale=7.0))
        assert scaled.assignments == plain.assignments
        assert scaled.objective == pytest.approx(plain.objective)


def test_only_sias_configuration_sizes_are_candidates() -> None:
    # A on 3 GPUs (goodput 3.9) would beat everything; Sia on 4-GPU nodes never offers 3.
    a = job("A", (1.0, 2.0, 3.9, 4.0))
    out = SiaPolicy().decide(RoundInput({"V100": 3}, (a,)))
    assert out.assignments["A"] == TWO
    free = SiaPolicy(SiaParams(gpus_per_node=None)).decide(RoundInput({"V100": 3}, (a,)))
    assert free.assignments["A"] == THREE


def test_restart_factor_discounts_only_other_configurations_of_a_running_job() -> None:
    # A runs on 1 GPU, age 1000 s, 10 restarts, P = 50 s: r = max(1000 - 500, 0) / 1050.
    r = 500.0 / 1050.0
    a = job("A", (1.0, 2.0, 4.0), current=ONE, age_s=1000.0, restarts=10)
    out = SiaPolicy().decide(RoundInput({"V100": 4}, (a,)))
    # keep 1 GPU: 1.00; move to 4: round(sqrt(4 r), 2) = 1.38; to 2: round(sqrt(2 r), 2) = 0.98
    assert round(math.sqrt(4 * r), 2) == 1.38
    assert out.assignments["A"] == FOUR and out.objective == pytest.approx(1.38)
    # Many more restarts: r = 0, every change scores 0 and A keeps its GPU.
    stuck = job("A", (1.0, 2.0, 4.0), current=ONE, age_s=1000.0, restarts=30)
    assert SiaPolicy().decide(RoundInput({"V100": 4}, (stuck,))).assignments["A"] == ONE
    # An idle job (no current configuration) is not discounted, as in Sia's simulator.
    idle = job("A", (1.0, 2.0, 4.0), age_s=1000.0, restarts=30)
    out_idle = SiaPolicy().decide(RoundInput({"V100": 4}, (idle,)))
    assert out_idle.assignments["A"] == FOUR and out_idle.objective == pytest.approx(2.0)


def test_a_restoring_job_is_pinned_in_both_modes() -> None:
    a = job("A", (1.0, 2.0, 4.0), current=ONE, restoring=True)
    # A stays on 1 GPU (1.00); B takes the best of what is left (2 of 3 GPUs).
    paper = make_policy("sia").decide(instance(a))
    assert paper.assignments == {"A": ONE, "B": TWO}
    assert paper.objective == pytest.approx(1.00 + 1.05)
    ref = make_policy("sia-reference").decide(instance(a))
    assert ref.assignments == {"A": ONE, "B": TWO}  # 1.00 + 0.95 < 1.00 + 1.1 (B idle)
    assert ref.objective == pytest.approx(1.00 + 0.95)
    unpinned = SiaPolicy(SiaParams(pin_restoring=False)).decide(instance(a))
    assert unpinned.assignments == {"A": TWO, "B": TWO}


def test_sia_modes_cite_their_settings() -> None:
    assert (SIA_PAPER.p, SIA_PAPER.lambda_n) == (0.5, -1.0)
    assert (SIA_REFERENCE.p, SIA_REFERENCE.lambda_n) == (-0.5, 1.1)
    doc = sia_module.__doc__ or ""
    for setting in ("sia_default_p_val = -0.5", "sia_default_lambda_n = 1.1", "p = +0.5",
                    "lambda_n = -1", "clipped at 3000", "rounded to 2 decimals"):
        assert setting in doc


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"p": 0.5, "lambda_n": 1.1}, "lambda_n"),  # same sign: the idle term would be a reward
    ({"p": -0.5, "lambda_n": -1.0}, "lambda_n"),
    ({"p": 0.0}, "p"),
    ({"p": math.nan}, "p"),
    ({"gpus_per_node": 0}, "gpus_per_node"),
    ({"clip": -1.0}, "clip"),
    ({"decimals": -1}, "decimals"),
])
def test_sia_params_refuse_bad_values_naming_the_field(kwargs: dict[str, float],
                                                       field: str) -> None:
    with pytest.raises(InvalidRoundInputError) as err:
        SiaParams(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


# ---------------------------------------------------------------- OAK's named choices

def oak_job(**kw: object) -> JobRoundState:
    # 600 s of progress, P = 50 s (CIFAR-10), old enough for r to apply.
    base: dict[str, object] = {"t_progress": 600.0, "age_s": 2000.0}
    base.update(kw)
    return JobRoundState("A", (ONE, FOUR), (1.0, 4.0), app="cifar10",
                         **base)  # type: ignore[arg-type]


def test_t_ckpt_counts_failures_by_default_and_every_restart_on_request() -> None:
    # 300 s of checkpoint time, of which 100 s after failures. Idle job: r on both options.
    j = oak_job(t_ckpt=300.0, t_ckpt_failures=100.0)
    r_fail, r_all = 600.0 / 750.0, 600.0 / 950.0
    out = OakPolicy().decide(RoundInput({"V100": 4}, (j,)))
    assert out.objective == pytest.approx(math.sqrt(4.0 * r_fail))
    every = OakPolicy(OakParams(t_ckpt_source="all")).decide(RoundInput({"V100": 4}, (j,)))
    assert every.objective == pytest.approx(math.sqrt(4.0 * r_all))


def test_r_discounts_changed_configurations_only_by_default() -> None:
    # Running on 4 GPUs with r = 0.25: keeping them scores sqrt(4) = 2 by default ("changed")
    # and sqrt(4 * 0.25) = 1 < mu_na = 1.1 when r discounts the current one too ("all").
    j = oak_job(t_ckpt_failures=1750.0, current=FOUR)  # r = 600 / (600 + 1750 + 50) = 0.25
    out = OakPolicy().decide(RoundInput({"V100": 4}, (j,)))
    assert out.assignments["A"] == FOUR and out.objective == pytest.approx(2.0)
    literal = OakPolicy(OakParams(r_scope="all")).decide(RoundInput({"V100": 4}, (j,)))
    assert literal.assignments["A"] is None and literal.objective == pytest.approx(1.1)


def test_oak_pins_a_restoring_job() -> None:
    j = oak_job(current=ONE, restoring=True)
    assert OakPolicy().decide(RoundInput({"V100": 4}, (j,))).assignments["A"] == ONE
    free = OakPolicy(OakParams(pin_restoring=False)).decide(RoundInput({"V100": 4}, (j,)))
    assert free.assignments["A"] == FOUR


def test_unstarted_jobs_have_r_one() -> None:
    # No progress yet: r = 1 whatever T_ckpt says (else r = 0 and a new job never starts).
    j = oak_job(t_progress=0.0, t_ckpt=500.0, t_ckpt_failures=500.0)
    assert OakPolicy().decide(RoundInput({"V100": 4}, (j,))).objective == pytest.approx(2.0)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"t_ckpt_source": "restarts"}, "t_ckpt_source"),
    ({"r_scope": "current"}, "r_scope"),
])
def test_oak_params_refuse_unknown_choices_naming_the_field(kwargs: dict[str, str],
                                                            field: str) -> None:
    with pytest.raises(InvalidRoundInputError) as err:
        OakParams(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


# ---------------------------------------------------------------- Lookahead

def test_failure_rate_is_pooled_over_live_time() -> None:
    jobs = (oak_job(failures=3, t_ckpt=0.0),
            JobRoundState("B", (ONE,), (1.0,), t_progress=1200.0, failures=1))
    # 4 failures in 1800 s of live time = 4 * 60 / 1800 per round
    assert failure_rate(prepare(RoundInput({"V100": 4}, jobs))) == pytest.approx(4 * 60 / 1800)


def test_lookahead_values_a_resize_by_expected_goodput_over_the_horizon() -> None:
    # A runs on 1 GPU; failures at 0.1 per round: 1/H = 0.1/60 + 1/1800 -> H = 450 s.
    # Moving to 4 GPUs restores for P = 50 s: E = 4 * 400/450 = 3.556, sqrt = 1.886 > 1.
    a = oak_job(current=ONE, failures=1, t_progress=600.0)
    out = LookaheadPolicy().decide(RoundInput({"V100": 4}, (a,)))
    assert out.assignments["A"] == FOUR
    assert out.objective == pytest.approx(math.sqrt(4.0 * 400.0 / 450.0))
    # ImageNet (P = 250 s) scaling poorly (1.3 on 2 GPUs) stays on 1 GPU: moving scores
    # sqrt(1.3 * 200/450) = 0.76, keeping scores sqrt(1) = 1. (Sia would move: sqrt(1.3) > 1.)
    b = JobRoundState("A", (ONE, TWO), (1.0, 1.3), app="imagenet", t_progress=600.0,
                      age_s=2000.0, current=ONE, failures=1)
    assert LookaheadPolicy().decide(RoundInput({"V100": 4}, (b,))).assignments["A"] == ONE


def test_exposure_weight_favours_the_job_failures_stretch_most() -> None:
    # Two idle jobs that trained before, one GPU free, failures at 0.1 per round (H = 450 s).
    # E: CIFAR-10 (P = 50) 1.5 * 400/450 = 1.333; ImageNet (P = 250) 2.0 * 200/450 = 0.889.
    # With q = 1 ImageNet is weighted by 1 + 0.1 * 250/60 = 1.417 -> 1.259, CIFAR-10 by 1.083
    # -> 1.444: CIFAR-10 still wins; with q = 3: 2.529 against 1.696, ImageNet wins.
    def idle(job_id: str, app: str, g: float) -> JobRoundState:
        return JobRoundState(job_id, (ONE,), (g,), app=app, t_progress=600.0, age_s=2000.0,
                             failures=1)
    r = RoundInput({"V100": 1}, (idle("c", "cifar10", 1.5), idle("i", "imagenet", 2.0)))
    params = LookaheadParams(sia=SiaParams(normalise=False))
    assert LookaheadPolicy(params).decide(r).assignments["c"] == ONE
    one = LookaheadParams(sia=SiaParams(normalise=False), exposure_weight=1.0)
    assert LookaheadPolicy(one).decide(r).assignments["c"] == ONE
    three = LookaheadParams(sia=SiaParams(normalise=False), exposure_weight=3.0)
    assert LookaheadPolicy(three).decide(r).assignments["i"] == ONE


def test_lookahead_without_failures_or_base_horizon_is_sia_without_its_factor() -> None:
    params = LookaheadParams(base_horizon_s=None)
    sia = SiaPolicy(SiaParams(restart_factor=False))
    r = instance(job("A", (1.0, 2.0, 4.0), current=ONE, age_s=900.0, restarts=4))
    ours = LookaheadPolicy(params).decide(r)
    assert ours.assignments == sia.decide(r).assignments


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"alpha": -1.0}, "alpha"),
    ({"base_horizon_s": 0.0}, "base_horizon_s"),
    ({"min_horizon_s": math.inf}, "min_horizon_s"),
    ({"exposure_weight": -1.0}, "exposure_weight"),
    ({"sia": SiaParams(p=-0.5, lambda_n=1.1)}, "sia.p"),
])
def test_lookahead_params_refuse_bad_values_naming_the_field(kwargs: dict[str, object],
                                                             field: str) -> None:
    with pytest.raises(InvalidRoundInputError) as err:
        LookaheadParams(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


@pytest.mark.parametrize("backend", ["glpk", "highs"])
def test_pins_that_leave_room_for_nothing_solve_without_the_solver(backend: str) -> None:
    # A holds 3 of 4 GPUs while restoring; B's options all need 4: nothing is left to solve.
    # (Sent to GLPK, such a model aborted the whole process in its presolver.)
    a = JobRoundState("A", (Configuration("V100", 3, 1),), (2.0,), current=Configuration(
        "V100", 3, 1), restoring=True, t_progress=10.0)
    b = JobRoundState("B", (FOUR,), (3.0,))
    for policy in (OakPolicy(backend=backend), SiaPolicy(backend=backend),
                   LookaheadPolicy(backend=backend)):
        out = policy.decide(RoundInput({"V100": 4}, (a, b)))
        assert out.assignments == {"A": Configuration("V100", 3, 1), "B": None}

"""Lookahead: Sia's goodput objective valued over the time an allocation is expected to last.

Our policy (not from either paper). Sia and OAK discount a job by a factor of its *past*
(restarts so far, or checkpoint time so far); neither asks what an allocation will be worth
*from now on*. Under failures that is what matters: an allocation lasts until the job's next
failure, about `round_s / lambda` seconds, and any change of configuration first pays a
restore of P seconds on the new GPUs. Lookahead values each option by its expected goodput
over that horizon:

    E_ij = G_ij * max(H - c_ij, 0) / H,   1 / H = lambda_hat / round_s + 1 / H_0

where `c_ij = P_i` if option j restores the job's checkpoint (a change of configuration, or a
start of a job that has trained before) and 0 if it keeps the current configuration or starts
a job that has nothing to restore. `lambda_hat` is the failure rate the round's jobs have shown
so far (failed attempts per round of live attempt time, pooled over the active jobs, since the
failure process is shared). `H_0` (default 1,800 s, 30 rounds) is how long an allocation
lasts without failures, until arrivals and completions reshuffle the cluster; it keeps Sia's
reluctance to resize when nothing fails (without it, Lookahead resized about twice as often as
Sia at lambda = 0 in trial runs on two seeds). The score is Sia's (normalisation, configuration
set, p = +0.5, idle penalised, pinning during restore) with E in place of Sia's
restart-discounted goodput. OAK's age key is available (`alpha`) but off by default: in trial
runs it cost up to 9% mean JCT at lambda = 0 on medium (parity with Sia is a goal).

The expected-goodput factor looks forward, so it cannot collapse the way a history-based
factor can: a job that failed often is not devalued for it, and an idle job is always worth
more than the idle penalty, so nothing starves for lack of an age key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from firepool.scheduling.assignment import solve_assignment
from firepool.scheduling.errors import InvalidRoundInputError
from firepool.scheduling.policies.oak import pinned_options
from firepool.scheduling.policies.sia import SiaParams, normalised_goodput, sia_allowed
from firepool.scheduling.prepare import PreparedRound, prepare
from firepool.scheduling.rounds import RoundInput, RoundResult
from firepool.scheduling.utility import age_key, p_restart_for

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class LookaheadParams:
    """`alpha`/`k_max`: OAK's age key (alpha = 0, the default, turns it off); `base_horizon_s`
    is H_0 (None: infinite, so that without failures E = G); `min_horizon_s` bounds the horizon
    from below so that a burst of early failures cannot zero every restoring option.
    `exposure_weight` q > 0 multiplies E by `(1 + lambda_hat P / round)^q`, favouring jobs whose
    wall time failures stretch most (the long ImageNet jobs that set the worst case); off by
    default: on the tuning seeds it moved the worst case by under 2% and cost mean JCT on
    medium (docs/reproduction.md)."""

    sia: SiaParams = field(default_factory=lambda: SiaParams(p=0.5, lambda_n=-1.0))
    alpha: float = 0.0
    k_max: float = 100.0
    min_horizon_s: float = 60.0
    base_horizon_s: float | None = 1800.0
    exposure_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.sia.p <= 0:
            raise InvalidRoundInputError("Lookahead maximises: sia.p must be > 0", field="sia.p")
        if not (math.isfinite(self.alpha) and self.alpha >= 0.0):
            raise InvalidRoundInputError("alpha must be finite and >= 0", field="alpha")
        if not (math.isfinite(self.k_max) and self.k_max >= 1.0):
            raise InvalidRoundInputError("k_max must be finite and >= 1", field="k_max")
        if self.base_horizon_s is not None and not (
            math.isfinite(self.base_horizon_s) and self.base_horizon_s > 0.0
        ):
            raise InvalidRoundInputError(
                "base_horizon_s must be finite and > 0", field="base_horizon_s"
            )
        if not (math.isfinite(self.exposure_weight) and self.exposure_weight >= 0.0):
            raise InvalidRoundInputError(
                "exposure_weight must be finite and >= 0", field="exposure_weight"
            )
        if not (math.isfinite(self.min_horizon_s) and self.min_horizon_s > 0.0):
            raise InvalidRoundInputError(
                "min_horizon_s must be finite and > 0", field="min_horizon_s"
            )


def failure_rate(prep: PreparedRound) -> float:
    """Failed attempts per round of live-attempt time, pooled over the round's jobs."""
    failures = sum(j.failures for j in prep.jobs)
    live = sum(j.t_progress + j.t_ckpt for j in prep.jobs)
    if failures == 0 or live <= 0.0:
        return 0.0
    return failures * prep.round_s / live


def expected_goodput(prep: PreparedRound, goodput: FloatArray, lam: float,
                     min_horizon_s: float, base_horizon_s: float | None = None) -> FloatArray:
    """G * max(H - c, 0) / H per option (see the module docstring); G itself when there is
    neither a failure rate nor a base horizon."""
    rate = lam / prep.round_s + (1.0 / base_horizon_s if base_horizon_s else 0.0)
    if rate <= 0.0:
        return goodput
    horizon = max(1.0 / rate, min_horizon_s)
    cost = np.array([p_restart_for(j.app, j.p_restart) if j.t_progress > 0.0 else 0.0
                     for j in prep.jobs], dtype=np.float64)[prep.opt_job]
    cost = np.where(prep.opt_is_current, 0.0, cost)
    return goodput * np.maximum(horizon - cost, 0.0) / horizon


def lookahead_utilities(prep: PreparedRound, params: LookaheadParams) -> FloatArray:
    """Per-option utility `E^p * K` (before Sia's configuration-set mask)."""
    lam = failure_rate(prep)
    e = expected_goodput(prep, normalised_goodput(prep, params.sia), lam,
                         params.min_horizon_s, params.base_horizon_s)
    if params.exposure_weight > 0.0 and lam > 0.0:
        # A job's wall time stretches by 1 + lambda P / round under failures: weight it up.
        stretch = np.array([1.0 + lam * p_restart_for(j.app, j.p_restart) / prep.round_s
                            for j in prep.jobs], dtype=np.float64)
        e = e * np.power(stretch, params.exposure_weight)[prep.opt_job]
    k = np.array([age_key(j.t_queue, params.alpha, params.k_max) for j in prep.jobs],
                 dtype=np.float64)
    return np.power(np.maximum(e, 0.0), params.sia.p) * k[prep.opt_job]


@dataclass(frozen=True, slots=True)
class LookaheadPolicy:
    """Our failure-aware policy; see the module docstring."""

    params: LookaheadParams = field(default_factory=LookaheadParams)
    backend: str | None = None
    name: str = "lookahead"

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        s = self.params.sia
        forced = pinned_options(prep) if s.pin_restoring else None
        utility = np.where(sia_allowed(prep, s, forced), lookahead_utilities(prep, self.params),
                           -np.inf)
        sol = solve_assignment(prep, utility, s.lambda_n, self.backend, forced=forced)
        return prep.result(self.name, sol.choice, sol.objective, sol.backend)

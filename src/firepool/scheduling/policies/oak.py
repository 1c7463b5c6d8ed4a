"""OAK: composite utility `(G * r)^p * K` solved exactly by the assignment MILP (paper §III)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from firepool.scheduling.assignment import solve_assignment
from firepool.scheduling.prepare import PreparedRound, prepare
from firepool.scheduling.rounds import RoundInput, RoundResult
from firepool.scheduling.utility import (
    OakParams,
    age_key,
    composite_utility,
    p_restart_for,
    restart_factor,
)

FloatArray = npt.NDArray[np.float64]


def job_factors(prep: PreparedRound, params: OakParams) -> tuple[FloatArray, FloatArray]:
    """Per-job restart factor r_i and age key K_i."""
    r = np.array(
        [
            restart_factor(j.t_progress, j.t_ckpt, p_restart_for(j.app, j.p_restart), j.age_s)
            for j in prep.jobs
        ],
        dtype=np.float64,
    )
    k = np.array(
        [age_key(j.t_queue, params.alpha, params.k_max) for j in prep.jobs], dtype=np.float64
    )
    return r, k


def oak_utilities(prep: PreparedRound, params: OakParams) -> FloatArray:
    """U for every option of the round."""
    r, k = job_factors(prep, params)
    return composite_utility(prep.opt_goodput, r[prep.opt_job], k[prep.opt_job], params.p)


@dataclass(frozen=True, slots=True)
class OakPolicy:
    """The paper's OAK; `backend` picks the MILP solver (None = fastest installed)."""

    params: OakParams = field(default_factory=OakParams)
    backend: str | None = None
    name: str = "oak"

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        utility = oak_utilities(prep, self.params)
        sol = solve_assignment(prep, utility, self.params.mu_na, self.backend)
        return prep.result(self.name, sol.choice, sol.objective, sol.backend)


@dataclass(frozen=True, slots=True)
class SiaPolicy:
    """Sia as the paper runs it: goodput only (r = K = 1), same power p and the same MILP."""

    params: OakParams = field(default_factory=OakParams)
    backend: str | None = None
    name: str = "sia"

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        utility = np.power(prep.opt_goodput, self.params.p)
        sol = solve_assignment(prep, utility, self.params.mu_na, self.backend)
        return prep.result(self.name, sol.choice, sol.objective, sol.backend)

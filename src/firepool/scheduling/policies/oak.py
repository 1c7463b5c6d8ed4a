"""OAK: composite utility `(G * r)^p * K` solved exactly by the assignment MILP (paper §III).

Where the paper leaves a rule open, `OakParams` names the choice (see its docstring and
docs/reproduction.md): what `T_ckpt` counts, which options r discounts, and pinning of jobs
that are restoring.
"""

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
IntArray = npt.NDArray[np.int64]


def job_factors(prep: PreparedRound, params: OakParams) -> tuple[FloatArray, FloatArray]:
    """Per-job restart factor r_i (T_ckpt as `params.t_ckpt_source` says) and age key K_i."""
    failures_only = params.t_ckpt_source == "failures"
    r = np.array(
        [
            restart_factor(
                j.t_progress,
                j.t_ckpt_failures if failures_only else j.t_ckpt,
                p_restart_for(j.app, j.p_restart),
                j.age_s,
            )
            for j in prep.jobs
        ],
        dtype=np.float64,
    )
    k = np.array(
        [age_key(j.t_queue, params.alpha, params.k_max) for j in prep.jobs], dtype=np.float64
    )
    return r, k


def option_restart_factor(prep: PreparedRound, r: FloatArray, scope: str) -> FloatArray:
    """r per option: every option ("all"), or every option but the job's current one
    ("changed"; an idle job has no current option, so all its options are discounted)."""
    per_opt = r[prep.opt_job]
    if scope == "changed":
        per_opt = np.where(prep.opt_is_current, 1.0, per_opt)
    return per_opt


def pinned_options(prep: PreparedRound) -> IntArray:
    """Per job: its current option if it is restoring (pinned there), else -1."""
    current = prep.current_option()
    restoring = np.array([j.restoring for j in prep.jobs], dtype=np.bool_)
    return np.where(restoring & (current >= 0), current, -1).astype(np.int64)


def oak_utilities(prep: PreparedRound, params: OakParams) -> FloatArray:
    """U for every option of the round."""
    r, k = job_factors(prep, params)
    return composite_utility(
        prep.opt_goodput, option_restart_factor(prep, r, params.r_scope), k[prep.opt_job],
        params.p,
    )


@dataclass(frozen=True, slots=True)
class OakPolicy:
    """The paper's OAK; `backend` picks the MILP solver (None = fastest installed)."""

    params: OakParams = field(default_factory=OakParams)
    backend: str | None = None
    name: str = "oak"

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        utility = oak_utilities(prep, self.params)
        forced = pinned_options(prep) if self.params.pin_restoring else None
        sol = solve_assignment(prep, utility, self.params.mu_na, self.backend, forced=forced)
        return prep.result(self.name, sol.choice, sol.objective, sol.backend)

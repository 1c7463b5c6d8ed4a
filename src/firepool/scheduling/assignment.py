"""The per-round assignment MILP shared by OAK, Sia and the NSGA-II checks.

    max  sum_ij x_ij U_ij + mu_na * sum_i (1 - sum_j x_ij)
    s.t. sum_j x_ij <= 1                       for every job i
         sum_ij x_ij * replicas_ij [type g] <= R_g   for every GPU type g

Written as `min -(U - mu_na) @ x`. Two exact reductions shrink the model before it reaches the
solver: an option with `U <= mu_na` never beats leaving the job idle, and an option that needs
more GPUs of the same type than another option of the same job without a higher utility is
dominated. Neither changes the optimum; both matter at 500 jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from firepool.scheduling.errors import InvalidRoundInputError
from firepool.scheduling.milp import Milp, solve
from firepool.scheduling.prepare import PreparedRound

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Assignment:
    choice: IntArray  # per job: option index or -1
    objective: float
    backend: str


def undominated(prep: PreparedRound, utility: FloatArray, candidates: BoolArray) -> BoolArray:
    """Mask of candidate options not dominated by a smaller option of the same job and type."""
    idx = np.flatnonzero(candidates)
    if idx.size == 0:
        return candidates.copy()
    job, typ, rep, u = prep.opt_job[idx], prep.opt_type[idx], prep.opt_replicas[idx], utility[idx]
    order = np.lexsort((-u, rep, typ, job))  # by job, type, replicas asc, utility desc
    job, typ, u = job[order], typ[order], u[order]
    new_group = np.ones(order.size, dtype=np.bool_)
    new_group[1:] = (job[1:] != job[:-1]) | (typ[1:] != typ[:-1])
    group = np.cumsum(new_group) - 1
    # Offset each group above every earlier one, so one running max resets per group.
    span = float(u.max() - u.min()) + 1.0
    lifted = u - float(u.min()) + group * span
    prev_max = np.empty_like(lifted)
    prev_max[0] = -np.inf
    prev_max[1:] = np.maximum.accumulate(lifted)[:-1]
    prev_max[new_group] = -np.inf
    keep_sorted = lifted > prev_max + 1e-12 * span
    out = np.zeros_like(candidates)
    out[idx[order[keep_sorted]]] = True
    return out


def build_milp(
    prep: PreparedRound, gain: FloatArray, use: IntArray, capacity: FloatArray | None = None
) -> Milp:
    """Binary program choosing options `use` (indices) with per-option `gain` to maximise;
    `capacity` per type replaces the round's (what pinned jobs leave free)."""
    n = int(use.size)
    job = prep.opt_job[use]
    # Only jobs with two or more options need their "at most one" row.
    counts = np.bincount(job, minlength=prep.n_jobs)
    multi = counts[job] > 1
    job_rows_of = np.full(prep.n_jobs, -1, dtype=np.int64)
    multi_jobs = np.flatnonzero(counts > 1)
    job_rows_of[multi_jobs] = np.arange(multi_jobs.size)
    n_job_rows = int(multi_jobs.size)
    var = np.arange(n, dtype=np.int64)
    rows = np.concatenate([job_rows_of[job[multi]], n_job_rows + prep.opt_type[use]])
    cols = np.concatenate([var[multi], var])
    vals = np.concatenate([np.ones(int(multi.sum())), prep.opt_replicas[use].astype(np.float64)])
    cap = prep.capacity if capacity is None else capacity
    b = np.concatenate([np.ones(n_job_rows), cap])
    return Milp(c=-gain, rows=rows, cols=cols, vals=vals, b=b, binary=np.ones(n, dtype=np.bool_))


def solve_assignment(
    prep: PreparedRound,
    utility: FloatArray,
    mu_na: float,
    backend: str | None = None,
    *,
    reduce: bool = True,
    forced: IntArray | None = None,
) -> Assignment:
    """Optimal one-option-per-job choice for the utilities (within the MILP gap, `MIP_GAP`).

    `reduce` applies the exact dominance reduction first (tests compare both paths).
    `forced` (per job: an option index, or -1 for free) pins jobs to an option: their GPUs are
    taken out of the capacity and the rest is optimised, which is exactly the optimum under
    the constraint x_forced = 1 (Sia pins jobs that are checkpointing or restoring).
    """
    candidates = utility > mu_na
    capacity = prep.capacity
    choice = np.full(prep.n_jobs, -1, dtype=np.int64)
    if forced is not None and (pinned := forced >= 0).any():
        pinned_opts = forced[pinned]
        pinned_jobs = np.flatnonzero(pinned)
        capacity = capacity - usage(prep, forced)
        if np.any(capacity < -1e-9):
            raise InvalidRoundInputError(
                "pinned (restoring) jobs hold more GPUs than the cluster has",
                field="jobs.restoring",
            )
        candidates = candidates & ~pinned[prep.opt_job]
        # When no free option fits what the pins leave, there is nothing to solve: GLPK's
        # presolver would remove every column and abort the process ("glp_add_cols: ncs =
        # 0"). Otherwise the model goes to the solver unchanged (options too big for the
        # remaining capacity are removed by its presolver, exactly).
        if not np.any(candidates & (prep.opt_replicas <= capacity[prep.opt_type] + 1e-9)):
            candidates = np.zeros_like(candidates)
        choice[pinned_jobs] = pinned_opts
    if reduce:
        use = np.flatnonzero(undominated(prep, utility, candidates))
    else:
        use = np.flatnonzero(candidates)
    problem = build_milp(prep, utility[use] - mu_na, use, capacity)
    solution = solve(problem, backend)
    chosen = use[solution.x > 0.5]
    choice[prep.opt_job[chosen]] = chosen
    return Assignment(choice, assignment_value(prep, utility, mu_na, choice), solution.backend)


def assignment_value(
    prep: PreparedRound, utility: FloatArray, mu_na: float, choice: IntArray
) -> float:
    """The OAK objective of a choice: chosen utilities plus mu_na per idle job."""
    picked = choice[choice >= 0]
    idle = int(np.count_nonzero(choice < 0))
    return float(utility[picked].sum()) + mu_na * idle


def usage(prep: PreparedRound, choice: IntArray) -> FloatArray:
    """GPUs used per type by a choice."""
    picked = choice[choice >= 0]
    return np.bincount(
        prep.opt_type[picked],
        weights=prep.opt_replicas[picked].astype(float),
        minlength=len(prep.types),
    ).astype(np.float64)

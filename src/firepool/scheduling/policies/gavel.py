"""Gavel baseline with the finish-time-fairness (FTF) policy, decided per round.

Gavel minimises the largest ratio rho = (finish time under the allocation) / (finish time on a
1/n share of the cluster). Per round, with remaining work W_i (seconds on one reference GPU),
age A_i and the fair-share goodput G_fair_i of job i:
    rho_ij   = (A_i + W_i / G_ij) / (A_i + W_i / G_fair_i)           if job i runs option j
    rho_i0   = (A_i + round + W_i / G_fair_i) / (A_i + W_i / G_fair_i)  if it waits a round
and the program minimises  t + eps * mean_i rho_i  s.t. rho_i <= t, one option per job, capacity.
The small mean term orders the jobs that are not the bottleneck. Like Gavel, which solves an LP
over time fractions, the LP relaxation is solved; it is rounded to one option per job by taking
options in decreasing LP weight while they fit, then giving the most urgent idle jobs (largest
rho_i0) their best-fitting option. (The exact min-max integer program is intractable for GLPK's
branch and bound at 500 jobs: its LP bound is weak.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from firepool.scheduling.milp import Milp, solve
from firepool.scheduling.prepare import PreparedRound, prepare
from firepool.scheduling.rounds import RoundInput, RoundResult

FloatArray = npt.NDArray[np.float64]
_EPS = 1e-3


def fair_goodput(prep: PreparedRound) -> FloatArray:
    """Goodput of each job on an equal share of the cluster (time-sliced below one GPU)."""
    share = float(prep.capacity.sum()) / max(prep.n_jobs, 1)
    out = np.zeros(prep.n_jobs, dtype=np.float64)
    for i in range(prep.n_jobs):
        mine = prep.opt_job == i
        if not mine.any():
            continue
        reps = prep.opt_replicas[mine]
        good = prep.opt_goodput[mine]
        within = reps <= share
        if within.any():
            out[i] = float(good[within].max())
        else:
            k = int(np.argmin(reps))
            out[i] = float(good[k]) * share / float(reps[k])
    return out


@dataclass(frozen=True, slots=True)
class GavelPolicy:
    # HiGHS' LP is 5-25x faster than GLPK's on this degenerate min-max LP.
    backend: str | None = "highs"
    name: str = "gavel"

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        if prep.n_options == 0:  # nothing can run: every job idle (infeasible ones reported)
            return prep.result(self.name, np.full(prep.n_jobs, -1, dtype=np.int64), 0.0, "none")
        n, m = prep.n_options, prep.n_jobs
        age = np.array([j.age_s for j in prep.jobs], dtype=np.float64)
        work = np.array([j.remaining_work for j in prep.jobs], dtype=np.float64)
        g_fair = np.maximum(fair_goodput(prep), 1e-9)
        base = age + work / g_fair
        rho_none = (base + prep.round_s) / np.maximum(base, 1e-9)
        g = np.maximum(prep.opt_goodput, 1e-9)
        j = prep.opt_job
        rho = (age[j] + work[j] / g) / np.maximum(base[j], 1e-9)
        rho = np.where(prep.opt_goodput > 0, rho, rho_none[j])
        delta = rho - rho_none[j]
        # Variables: x_0..x_{n-1} (binary), t (continuous, index n).
        var = np.arange(n, dtype=np.int64)
        rows = [
            j,
            m + prep.opt_type,
            m + len(prep.types) + j,
            np.arange(m, dtype=np.int64) + m + len(prep.types),
        ]
        cols = [var, var, var, np.full(m, n, dtype=np.int64)]
        vals = [np.ones(n), prep.opt_replicas.astype(np.float64), delta, -np.ones(m)]
        b = np.concatenate([np.ones(m), prep.capacity, -rho_none])
        c = np.concatenate([_EPS / max(m, 1) * delta, [1.0]])
        problem = Milp(
            c=c,
            rows=np.concatenate(rows),
            cols=np.concatenate(cols),
            vals=np.concatenate(vals),
            b=b,
            binary=np.concatenate([np.ones(n, dtype=np.bool_), [False]]),
        )
        sol = solve(problem, self.backend, relax=True)
        choice = _round(prep, sol.x[:n], rho, rho_none)
        picked = np.where(choice >= 0, rho[np.maximum(choice, 0)], rho_none)
        worst = float(picked.max()) if m else 0.0
        return prep.result(self.name, choice, worst, f"{sol.backend}-lp")


def _round(prep: PreparedRound, weight: FloatArray, rho: FloatArray, rho_none: FloatArray
           ) -> npt.NDArray[np.int64]:
    """One option per job from LP weights, never exceeding capacity."""
    choice = np.full(prep.n_jobs, -1, dtype=np.int64)
    free = prep.capacity.copy()

    def take(k: int) -> None:
        i, t = int(prep.opt_job[k]), int(prep.opt_type[k])
        if choice[i] < 0 and prep.opt_replicas[k] <= free[t]:
            choice[i] = k
            free[t] -= prep.opt_replicas[k]

    for k in np.argsort(-weight, kind="stable").tolist():
        if weight[k] <= 1e-6:
            break
        take(k)
    by_rho = np.argsort(rho, kind="stable")
    for i in np.argsort(-rho_none, kind="stable").tolist():
        if choice[i] >= 0:
            continue
        for k in by_rho[prep.opt_job[by_rho] == i].tolist():
            if rho[k] < rho_none[i]:
                take(k)
                if choice[i] >= 0:
                    break
    return choice

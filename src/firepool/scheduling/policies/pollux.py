"""Pollux baseline: goodput with the aggregate restart factor, searched by NSGA-II 100 x 100.

Fitness, as in Pollux's cluster policy: the power mean (p = -1) of per-job speedups, where a job
whose allocation changes has its speedup multiplied by `max(A - n*P, 0) / (A + P)` (A = age,
n = restarts so far, P = restart penalty). An idle job counts with speedup 0, which the power mean
punishes hard, so the search spreads GPUs across jobs. Second objective: cluster efficiency
(speedup per allocated GPU), as Pollux keeps a Pareto front of both. The published defaults are
population 100 and 100 generations; `pop_size`/`n_gen` bound it for very large rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from firepool.scheduling.greedy import greedy_choice
from firepool.scheduling.nsga import run_nsga2
from firepool.scheduling.prepare import prepare
from firepool.scheduling.rounds import RoundInput, RoundResult
from firepool.scheduling.utility import aggregate_restart_factor, p_restart_for

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_POWER = -1.0
_EPS = 1e-3


@dataclass(frozen=True, slots=True)
class PolluxPolicy:
    pop_size: int = 100
    n_gen: int = 100
    seed: int = 0
    name: str = "pollux"

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        if prep.n_options == 0:  # nothing can run: every job idle (infeasible ones reported)
            return prep.result(self.name, np.full(prep.n_jobs, -1, dtype=np.int64), 0.0, "none")
        factor = np.array(
            [
                aggregate_restart_factor(j.age_s, j.restarts, p_restart_for(j.app, j.p_restart))
                for j in prep.jobs
            ],
            dtype=np.float64,
        )
        current = prep.current_option()
        speed = prep.opt_goodput
        reps = prep.opt_replicas.astype(np.float64)
        n_jobs = prep.n_jobs

        def objectives(choice: IntArray) -> FloatArray:
            has = choice >= 0
            k = np.maximum(choice, 0)
            s = np.where(has, speed[k], 0.0)
            changed = choice != current[None, :]
            s = np.where(changed, s * factor[None, :], s)
            mean = np.power(np.sum(np.power(s + _EPS, _POWER), axis=1) / n_jobs, 1.0 / _POWER)
            gpus = np.sum(np.where(has, reps[k], 0.0), axis=1)
            efficiency = np.sum(s, axis=1) / np.maximum(gpus, 1.0)
            return np.column_stack([-mean, -efficiency])

        result = run_nsga2(
            prep,
            objectives,
            n_obj=2,
            pop_size=self.pop_size,
            n_gen=self.n_gen,
            seeds=(current, greedy_choice(prep, speed)),
            seed=self.seed,
        )
        return prep.result(
            self.name,
            result.choice,
            -float(result.objectives[0]),
            f"nsga2-{self.pop_size}x{self.n_gen}",
        )

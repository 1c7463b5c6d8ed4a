"""Hybrid OAK (`oak-nsga2`): the OAK utility searched by NSGA-II, population 20 x 20 generations.

The paper (§V-E) shows the composite utility is solver-agnostic; the evolutionary variant trades
exactness for continuous reallocation. Here it is seeded with the current allocation and a greedy
allocation, and repaired so every candidate respects capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from firepool.scheduling.greedy import greedy_choice
from firepool.scheduling.nsga import run_nsga2
from firepool.scheduling.policies.oak import oak_utilities
from firepool.scheduling.prepare import prepare
from firepool.scheduling.rounds import RoundInput, RoundResult
from firepool.scheduling.utility import OakParams

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class OakNsga2Policy:
    params: OakParams = field(default_factory=OakParams)
    pop_size: int = 20
    n_gen: int = 20
    seed: int = 0
    name: str = "oak-nsga2"

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        if prep.n_options == 0:  # nothing can run: every job idle (infeasible ones reported)
            idle = self.params.mu_na * prep.n_jobs
            return prep.result(self.name, np.full(prep.n_jobs, -1, dtype=np.int64), idle, "none")
        utility = oak_utilities(prep, self.params)
        gain = utility - self.params.mu_na

        def objectives(choice: IntArray) -> FloatArray:
            picked = np.where(choice >= 0, gain[np.maximum(choice, 0)], 0.0)
            out: FloatArray = -picked.sum(axis=1, keepdims=True)
            return out

        result = run_nsga2(
            prep,
            objectives,
            n_obj=1,
            pop_size=self.pop_size,
            n_gen=self.n_gen,
            seeds=(prep.current_option(), greedy_choice(prep, gain)),
            seed=self.seed,
        )
        value = -float(result.objectives[0]) + self.params.mu_na * prep.n_jobs
        return prep.result(self.name, result.choice, value, f"nsga2-{self.pop_size}x{self.n_gen}")

"""pymoo 0.6 operators for the choice encoding of `nsga_space.py` (imported only when needed).

Kept apart so that the rest of `firepool.scheduling` (OAK, Sia, Gavel, DRF) works on an install
without pymoo; the NSGA-II policies then fail with `SolverUnavailableError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.config import Config
from pymoo.core.crossover import Crossover
from pymoo.core.mutation import Mutation
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair
from pymoo.optimize import minimize

from firepool.scheduling.nsga_space import ChoiceSpace, IntArray, Objectives

Config.warnings["not_compiled"] = False

__all__ = ["NSGA2", "minimize"]


class ChoiceProblem(Problem):  # type: ignore[misc]
    def __init__(self, space: ChoiceSpace, objectives: Objectives, n_obj: int) -> None:
        super().__init__(
            n_var=int(space.n_opts.size), n_obj=n_obj, xl=0, xu=space.n_opts, vtype=int
        )
        self.space = space
        self.objectives = objectives

    def _evaluate(self, x: Any, out: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        genes = np.asarray(x, dtype=np.int64)
        out["F"] = self.objectives(self.space.decode(genes))


class UniformCrossover(Crossover):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__(n_parents=2, n_offsprings=2)

    def _do(self, problem: Any, x: Any, *args: Any, random_state: Any = None, **kwargs: Any) -> Any:
        a, b = x[0], x[1]
        mask = random_state.random(a.shape) < 0.5
        return np.stack([np.where(mask, a, b), np.where(mask, b, a)])


class GeneMutation(Mutation):  # type: ignore[misc]
    def __init__(self, space: ChoiceSpace, anchor: IntArray) -> None:
        super().__init__()
        self.space = space
        self.anchor = anchor

    def _do(self, problem: Any, x: Any, *args: Any, random_state: Any = None, **kwargs: Any) -> Any:
        genes = np.asarray(x, dtype=np.int64).copy()
        n_jobs = genes.shape[1]
        rate = max(1.0 / n_jobs, 0.02)
        flip = random_state.random(genes.shape) < rate
        fresh = np.floor(random_state.random(genes.shape) * (self.space.n_opts + 1))
        genes = np.where(flip, fresh.astype(np.int64), genes)
        # Now and then pull an individual back to the current allocation (cheap stability).
        back = random_state.random(genes.shape[0]) < 0.05
        genes[back] = self.anchor
        return genes


class CapacityRepair(Repair):  # type: ignore[misc]
    def __init__(self, space: ChoiceSpace) -> None:
        super().__init__()
        self.space = space

    def _do(self, problem: Any, x: Any, *args: Any, random_state: Any = None, **kwargs: Any) -> Any:
        rng = random_state if random_state is not None else np.random.default_rng(0)
        return self.space.repair(np.asarray(x, dtype=np.int64), rng)

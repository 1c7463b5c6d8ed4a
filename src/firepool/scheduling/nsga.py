"""NSGA-II over "one option or none per job", through pymoo 0.6, with a capacity repair.

A solution is one integer gene per job: 0 = no allocation, g = the job's g-th option. Random
genes overshoot capacity almost surely on a large cluster, so every individual passes a repair
step that walks the jobs in a random order and drops the allocations that no longer fit their
GPU type: whatever crossover and mutation produce, the population stays feasible, at any size.
Operators are vectorised over the population (numpy), the only per-individual Python work is
pymoo's own bookkeeping. Runs are deterministic for a seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from firepool.scheduling.errors import SolverUnavailableError
from firepool.scheduling.nsga_space import ChoiceSpace, FloatArray, IntArray, Objectives
from firepool.scheduling.prepare import PreparedRound

__all__ = ["ChoiceSpace", "NsgaResult", "Objectives", "run_nsga2"]


@dataclass(frozen=True, slots=True)
class NsgaResult:
    choice: IntArray  # per job option index or -1
    objectives: FloatArray


def run_nsga2(
    prep: PreparedRound,
    objectives: Objectives,
    *,
    n_obj: int,
    pop_size: int,
    n_gen: int,
    seeds: Sequence[IntArray] = (),
    seed: int = 0,
) -> NsgaResult:
    """Minimise `objectives` over feasible choices; returns the best individual by objective 0.

    `seeds` are option-index choices (e.g. the current allocation, a greedy one) placed in the
    initial population, as Pollux seeds its search with the previous round's allocations.
    """
    try:
        # Imported here, not at the top: pymoo is an optional extra (see nsga_ops.py).
        import firepool.scheduling.nsga_ops as nsga_ops
    except ImportError as exc:
        raise SolverUnavailableError("NSGA-II needs pymoo 0.6 (extra 'solvers')",
                                     field="policy") from exc
    space = ChoiceSpace.of(prep)
    if prep.n_jobs == 0 or prep.n_options == 0:
        empty = np.full(prep.n_jobs, -1, dtype=np.int64)
        return NsgaResult(empty, objectives(empty[None, :])[0])
    rng = np.random.default_rng(seed)
    seeded = [space.encode(s) for s in seeds][:pop_size]
    # Random individuals allocate about as many GPUs as the cluster has, then get repaired.
    mean_demand = float(prep.opt_replicas.mean())
    density = min(1.0, float(prep.capacity.sum()) / max(mean_demand * prep.n_jobs, 1.0))
    pool = space.random(pop_size - len(seeded), rng, density)
    initial = np.vstack([*(s[None, :] for s in seeded), pool]) if seeded else pool
    initial = space.repair(initial, rng)
    anchor = space.encode(prep.current_option())
    algorithm = nsga_ops.NSGA2(
        pop_size=pop_size,
        sampling=initial,
        crossover=nsga_ops.UniformCrossover(),
        mutation=nsga_ops.GeneMutation(space, anchor),
        repair=nsga_ops.CapacityRepair(space),
        eliminate_duplicates=False,
    )
    problem = nsga_ops.ChoiceProblem(space, objectives, n_obj)
    res = nsga_ops.minimize(problem, algorithm, ("n_gen", n_gen), seed=seed, verbose=False,
                   copy_algorithm=False)
    pop_x = np.asarray(res.pop.get("X"), dtype=np.int64)
    pop_f = np.asarray(res.pop.get("F"), dtype=np.float64)
    best = int(np.argmin(pop_f[:, 0]))
    return NsgaResult(space.decode(pop_x[best]), pop_f[best])

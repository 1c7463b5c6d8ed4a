"""NSGA-II over "one option or none per job", through pymoo 0.6, with a capacity repair.

A solution is one integer gene per job: 0 = no allocation, g = the job's g-th option. Random
genes overshoot capacity almost surely on a large cluster, so every individual passes a repair
step that walks the jobs in a random order and drops the allocations that no longer fit their
GPU type: whatever crossover and mutation produce, the population stays feasible, at any size.
Operators are vectorised over the population (numpy), the only per-individual Python work is
pymoo's own bookkeeping. Runs are deterministic for a seed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from firepool.scheduling.errors import SolverUnavailableError
from firepool.scheduling.prepare import PreparedRound

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: Maps a population of choices (pop x jobs, option index or -1) to objectives to MINIMISE.
Objectives = Callable[[IntArray], FloatArray]


@dataclass(frozen=True, slots=True)
class ChoiceSpace:
    """Gene <-> option tables of one round."""

    table: IntArray  # jobs x (max options + 1); column 0 is -1 (no allocation)
    n_opts: IntArray  # options per job
    opt_type: IntArray
    opt_replicas: IntArray
    capacity: FloatArray

    @classmethod
    def of(cls, prep: PreparedRound) -> ChoiceSpace:
        n_opts = np.bincount(prep.opt_job, minlength=prep.n_jobs).astype(np.int64)
        width = int(n_opts.max(initial=0)) + 1
        table = np.full((prep.n_jobs, width), -1, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(n_opts)[:-1]])
        order = np.argsort(prep.opt_job, kind="stable")
        rank = np.arange(order.size) - starts[prep.opt_job[order]]
        table[prep.opt_job[order], rank + 1] = order
        return cls(table, n_opts, prep.opt_type, prep.opt_replicas, prep.capacity)

    def decode(self, genes: IntArray) -> IntArray:
        rows = np.arange(genes.shape[-1])
        return self.table[rows, genes]

    def encode(self, choice: IntArray) -> IntArray:
        """Option indices (-1 = none) back to genes."""
        genes = np.zeros(choice.shape, dtype=np.int64)
        for i, k in enumerate(choice.tolist()):
            if k >= 0:
                genes[i] = int(np.flatnonzero(self.table[i] == k)[0])
        return genes

    def repair(self, genes: IntArray, rng: np.random.Generator) -> IntArray:
        genes = np.clip(genes, 0, self.n_opts)
        opt = self.decode(genes)
        has = opt >= 0
        demand = np.where(has, self.opt_replicas[np.maximum(opt, 0)], 0).astype(np.float64)
        typ = np.where(has, self.opt_type[np.maximum(opt, 0)], -1)
        order = np.argsort(rng.random(genes.shape), axis=1)
        d = np.take_along_axis(demand, order, axis=1)
        t = np.take_along_axis(typ, order, axis=1)
        drop_sorted = np.zeros(genes.shape, dtype=np.bool_)
        for g, cap in enumerate(self.capacity.tolist()):
            mine = t == g
            used = np.cumsum(np.where(mine, d, 0.0), axis=1)
            drop_sorted |= mine & (used > cap + 1e-9)
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, axis=1)
        return np.where(drop, 0, genes)

    def random(self, n: int, rng: np.random.Generator, density: float) -> IntArray:
        draw = np.floor(rng.random((n, self.n_opts.size)) * self.n_opts + 1).astype(np.int64)
        on = rng.random((n, self.n_opts.size)) < density
        return np.where(on, draw, 0)


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
        nsga_ops = importlib.import_module("firepool.scheduling.nsga_ops")
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

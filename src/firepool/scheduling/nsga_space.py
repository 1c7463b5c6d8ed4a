"""The choice encoding NSGA-II searches (one gene per job: 0 = no allocation, g = the job's
g-th option) and its capacity repair, apart from the search itself: `nsga.py` runs the search
and `nsga_ops.py` wraps these tables in pymoo operators, so both import this module and
neither imports the other at module level (pymoo stays an optional, lazily imported extra).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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

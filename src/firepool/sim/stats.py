"""Percentiles and paired bootstrap confidence intervals (broker paper appendix B.4).

Percentiles interpolate linearly; a paired effect is summarised by the median of per-repeat
differences with a 95% bootstrap interval over repeats (seed 2027, 2,000 resamples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def bootstrap_ci(
    diffs: Sequence[float], *, stat: str = "median", seed: int = 2027, resamples: int = 2000
) -> tuple[float, float, float]:
    """(statistic, low, high) of the paired differences, 95% percentile bootstrap."""
    data = np.asarray([d for d in diffs if math.isfinite(d)], dtype=np.float64)
    if data.size == 0:
        return math.nan, math.nan, math.nan
    fn = np.median if stat == "median" else np.mean
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, data.size, size=(resamples, data.size))
    boots = fn(data[idx], axis=1)
    return float(fn(data)), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def fmt_ci(est: tuple[float, float, float], digits: int = 1) -> str:
    s, lo, hi = est
    return f"{s:+.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"

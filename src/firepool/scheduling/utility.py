"""OAK's score pieces: restart factors, the age key and the composite utility.

Formulas and defaults follow the scheduler paper (§III-B, §III-C, §IV-D, §V-A3):
`U_ij = (G_ij * r_i)^p * K_i`, `r_i = T_progress / (T_progress + T_ckpt + P_restart)`,
`K_i = min(exp(alpha * T_queue), K_max)`, with p = 0.5, alpha = 0.01, K_max = 100 and
mu_na = 1.1. The age key sits outside the power so that its boost does not depend on p.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from firepool.scheduling.errors import InvalidRoundInputError

#: Per-application restart penalty in seconds (paper §IV-D); 30 s for anything else.
P_RESTART_S: Mapping[str, float] = {
    "cifar10": 50.0,
    "deepspeech2": 25.0,
    "bert": 120.0,
    "yolov3": 80.0,
    "imagenet": 250.0,
    "ncf": 25.0,
    "gpt": 30.0,
}
DEFAULT_P_RESTART_S = 30.0


TCkptSource = Literal["failures", "all"]
RScope = Literal["changed", "all"]


@dataclass(frozen=True, slots=True)
class OakParams:
    """The four scheduler knobs (defaults: the paper's calibrated values, section V-A3) and the
    three places where the paper leaves its own rule open, each a named choice:

    * `t_ckpt_source`: what `T_ckpt` in r counts. "failures" (default) is section IV-D: the
      simulator adds the restart penalty on each *failure*; here the measured restore time
      after failed attempts. "all" counts every checkpoint and restore, resizes included (the
      paper's section III-A wording, "time spent in checkpoint or restore"): OAK's own resizes
      then lower r, which without the age key starves jobs (ablation cell c).
    * `r_scope`: which options r multiplies. "changed" (default, as Sia does with its factor)
      leaves the job's current configuration undiscounted, since keeping it costs no restart;
      "all" discounts the current one too (the formula read literally), which also pushes a
      running job towards idling.
    * `pin_restoring`: a job whose attempt is still restoring keeps its configuration this
      round (Sia's hard constraint); moving it would throw the restore away.

    The r = 1 rule for jobs that have not trained yet, or are younger than one restart penalty
    (section IV-D), is always on: without it `T_progress = 0` gives r = 0 and a new job could
    never be admitted.
    """

    p: float = 0.5
    alpha: float = 0.01
    k_max: float = 100.0
    mu_na: float = 1.1
    t_ckpt_source: TCkptSource = "failures"
    r_scope: RScope = "changed"
    pin_restoring: bool = True

    def __post_init__(self) -> None:
        if self.t_ckpt_source not in ("failures", "all"):
            raise InvalidRoundInputError(
                f"t_ckpt_source must be 'failures' or 'all', got {self.t_ckpt_source!r}",
                field="t_ckpt_source",
            )
        if self.r_scope not in ("changed", "all"):
            raise InvalidRoundInputError(
                f"r_scope must be 'changed' or 'all', got {self.r_scope!r}", field="r_scope"
            )
        # p < 0 makes (G*r)^p blow up as r -> 0 (paper §III-B), so it is refused.
        if not (math.isfinite(self.p) and self.p >= 0.0):
            raise InvalidRoundInputError("p must be finite and >= 0", field="p")
        if not (math.isfinite(self.alpha) and self.alpha >= 0.0):
            raise InvalidRoundInputError("alpha must be finite and >= 0", field="alpha")
        if not (math.isfinite(self.k_max) and self.k_max >= 1.0):
            raise InvalidRoundInputError("k_max must be finite and >= 1", field="k_max")
        if not (math.isfinite(self.mu_na) and self.mu_na >= 0.0):
            raise InvalidRoundInputError("mu_na must be finite and >= 0", field="mu_na")


def p_restart_for(app: str, override: float | None = None) -> float:
    """The restart penalty for an application: the override if given, else the paper's table."""
    if override is not None:
        return override
    return P_RESTART_S.get(app.lower(), DEFAULT_P_RESTART_S)


def restart_factor(t_progress: float, t_ckpt: float, p_restart: float, age_s: float) -> float:
    """OAK's decomposed restart factor.

    It is 1 until the job has made progress (nothing to protect yet) and, as the paper does for
    new jobs, while the job is younger than one restart penalty.
    """
    if t_progress <= 0.0 or age_s < p_restart:
        return 1.0
    return max(t_progress, 0.0) / (t_progress + t_ckpt + p_restart)


def aggregate_restart_factor(age_s: float, restarts: int, p_restart: float) -> float:
    """Pollux/Sia's aggregate factor `max(A - n*P, 0) / (A + P)`; 1 for jobs younger than P."""
    if age_s < p_restart:
        return 1.0
    return max(age_s - restarts * p_restart, 0.0) / (age_s + p_restart)


def age_key(t_queue: float, alpha: float, k_max: float) -> float:
    """`min(exp(alpha * T_queue), K_max)`, computed without overflow for huge waits."""
    exponent = alpha * max(t_queue, 0.0)
    if exponent >= math.log(k_max):
        return k_max
    return math.exp(exponent)


def composite_utility(
    goodput: npt.NDArray[np.float64],
    r: npt.NDArray[np.float64],
    k: npt.NDArray[np.float64],
    p: float,
) -> npt.NDArray[np.float64]:
    """`(G * r)^p * K`, element-wise (r and k already broadcast to the goodput's shape)."""
    return np.power(goodput * r, p) * k

"""Sia in two faithful modes: as the OAK paper describes it, and as Sia ships.

Both follow Sia's public simulator (`sia_policy.py` / `simulator_config.py` of the Sia artifact,
SOSP 2023) in everything but the sign of p and the idle term:

* configuration set: on nodes of `gpus_per_node` GPUs Sia offers 1, 2, 4, ... GPUs within one
  node, then whole nodes (4-GPU nodes: 1, 2, 4, 8, 12, 16 ...); other sizes are not candidates;
* goodput normalisation: each job's goodputs are divided by the smallest non-zero goodput over
  its candidate configurations (the smallest configuration = 1.0); values at or below 1e-4 are
  set to 1e-4 (Sia's ZERO_ALLOC_GAIN);
* restart factor: Pollux's aggregate `max(A - n P, 0) / (A + P)` (A = age, n = restarts,
  P = the application's restart penalty; 1 while A < P) multiplies every configuration of a job
  *other than its current one*, and only when the job has a current configuration;
* score: `(G_norm * r)^p`, rounded to 2 decimals and clipped at 3000;
* objective: `sum x * score + lambda_n * (#idle jobs)`, maximised for p > 0 and minimised for
  p < 0, with Sia's rule sign(lambda_n) != sign(p): the idle term always *penalises* an idle job;
* pinning: a job that is checkpointing or restoring keeps its configuration (a hard constraint).

Modes:

* `SIA_PAPER` (policy "sia"): the OAK paper's Sia, p = +0.5 (section IV-E: "its default fairness
  exponent p = 0.5"), maximised, lambda_n = -1 (Sia's command-line fallback when lambda_n is
  unset, of the sign its rule requires for p > 0).
* `SIA_REFERENCE` (policy "sia-reference"): Sia's shipped defaults, `sia_default_p_val = -0.5`
  (minimised) and `sia_default_lambda_n = 1.1` (an idle job costs 1.1, more than any allocated
  job's score of at most 1.0, so leaving a job idle is never cheaper than running it).

The restart penalties are the OAK paper's table (section IV-D) for both modes, as the paper
applies one table to every scheduler (Sia's own table differs: CIFAR-10 30 s, YOLOv3 45 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from firepool.scheduling.assignment import solve_assignment
from firepool.scheduling.errors import InvalidRoundInputError
from firepool.scheduling.memo import ConfigurationsMemo
from firepool.scheduling.policies.oak import pinned_options
from firepool.scheduling.prepare import PreparedRound, prepare
from firepool.scheduling.rounds import Configuration, RoundInput, RoundResult
from firepool.scheduling.utility import aggregate_restart_factor, p_restart_for

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Sia's floor for a normalised goodput (ZERO_ALLOC_GAIN).
ZERO_GAIN = 1e-4


def sia_sizes_allowed(replicas: int, gpus_per_node: int) -> bool:
    """Sia's configuration set: a power of two up to one node, or a whole number of nodes."""
    if replicas <= gpus_per_node:
        return replicas & (replicas - 1) == 0
    return replicas % gpus_per_node == 0


@dataclass(frozen=True, slots=True)
class SiaParams:
    """Sia's knobs. `p` != 0; `lambda_n` must have the opposite sign of p (Sia's rule), so the
    idle term penalises an idle job whichever way the objective is optimised."""

    p: float = 0.5
    lambda_n: float = -1.0
    gpus_per_node: int | None = 4  # None: keep every configuration (no Sia configuration set)
    normalise: bool = True
    decimals: int | None = 2
    clip: float = 3000.0
    restart_factor: bool = True
    pin_restoring: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.p) and self.p != 0.0):
            raise InvalidRoundInputError("p must be finite and != 0", field="p")
        if not math.isfinite(self.lambda_n) or self.lambda_n == 0.0:
            raise InvalidRoundInputError("lambda_n must be finite and != 0", field="lambda_n")
        if (self.lambda_n > 0) == (self.p > 0):
            raise InvalidRoundInputError(
                "sign(lambda_n) must differ from sign(p): the idle term is a penalty "
                f"(got p={self.p}, lambda_n={self.lambda_n})",
                field="lambda_n",
            )
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise InvalidRoundInputError("gpus_per_node must be >= 1", field="gpus_per_node")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise InvalidRoundInputError("clip must be finite and > 0", field="clip")
        if self.decimals is not None and self.decimals < 0:
            raise InvalidRoundInputError("decimals must be >= 0", field="decimals")

    @property
    def sense(self) -> float:
        """+1 when Sia maximises (p > 0), -1 when it minimises (p < 0)."""
        return 1.0 if self.p > 0 else -1.0


SIA_PAPER = SiaParams(p=0.5, lambda_n=-1.0)
SIA_REFERENCE = SiaParams(p=-0.5, lambda_n=1.1)


def sia_allowed(prep: PreparedRound, params: SiaParams,
                forced: npt.NDArray[np.int64] | None = None) -> BoolArray:
    """Options in Sia's configuration set, plus any option a job is pinned to (a restoring
    job keeps what it holds, whatever its size)."""
    if params.gpus_per_node is None:
        return np.ones(prep.n_options, dtype=np.bool_)
    g = params.gpus_per_node
    r = prep.opt_replicas
    # The rule once per size up to the largest, looked up per option (not once per option).
    sizes = np.array([sia_sizes_allowed(n, g) for n in range(int(r.max(initial=0)) + 1)])
    out: BoolArray = sizes[r]
    if forced is not None:
        out[forced[forced >= 0]] = True
    return out


def normalised_goodput(prep: PreparedRound, params: SiaParams) -> FloatArray:
    """Goodput per option over the job's smallest non-zero goodput in Sia's set, floored."""
    goodput = prep.opt_goodput
    if params.normalise:
        g = params.gpus_per_node
        # Per job, the smallest goodput over all its configurations in Sia's set (those the
        # cluster cannot run included); 1.0 where there is none, which divides by nothing.
        smallest = np.ones(prep.n_jobs, dtype=np.float64)
        for i, job in enumerate(prep.jobs):
            in_set = _SIA_SET.of(job.configurations, g)
            values = [v for v, ok in zip(job.goodputs, in_set, strict=True) if ok and v > ZERO_GAIN]
            if values:
                smallest[i] = min(values)
        goodput = goodput / smallest[prep.opt_job]
    return np.maximum(goodput, ZERO_GAIN)


def _in_sia_set(
    configurations: tuple[Configuration, ...], gpus_per_node: int | None
) -> tuple[bool, ...]:
    return tuple(
        gpus_per_node is None or sia_sizes_allowed(c.replicas, gpus_per_node)
        for c in configurations
    )


_SIA_SET = ConfigurationsMemo(_in_sia_set)


def sia_scores(prep: PreparedRound, params: SiaParams) -> FloatArray:
    """Sia's per-option score `round(clip((G_norm * r)^p))` (before the objective's sign)."""
    goodput = normalised_goodput(prep, params)
    if params.restart_factor:
        r = np.array(
            [
                aggregate_restart_factor(j.age_s, j.restarts, p_restart_for(j.app, j.p_restart))
                for j in prep.jobs
            ],
            dtype=np.float64,
        )
        has_current = prep.current_option() >= 0
        discount = has_current[prep.opt_job] & ~prep.opt_is_current
        goodput = np.where(discount, goodput * r[prep.opt_job], goodput)
        goodput = np.maximum(goodput, ZERO_GAIN) if params.p < 0 else goodput
    with np.errstate(divide="ignore"):
        score = np.power(goodput, params.p)
    if params.decimals is not None:
        score = np.round(score, params.decimals)
    return np.minimum(score, params.clip)


@dataclass(frozen=True, slots=True)
class SiaPolicy:
    """Sia (see the module docstring); `SiaPolicy()` is the OAK paper's mode, "sia"."""

    params: SiaParams = field(default_factory=lambda: SIA_PAPER)
    backend: str | None = None
    name: str = "sia"

    @property
    def goodput_only(self) -> bool:
        """True when the decision depends on goodputs alone (a simulator may memoise it)."""
        return not (self.params.restart_factor or self.params.pin_restoring)

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        p = self.params
        score = sia_scores(prep, p)
        # As a maximisation: sense * (sum x score + lambda_n * idle).
        forced = pinned_options(prep) if p.pin_restoring else None
        utility = np.where(sia_allowed(prep, p, forced), p.sense * score, -np.inf)
        sol = solve_assignment(prep, utility, p.sense * p.lambda_n, self.backend, forced=forced)
        objective = p.sense * sol.objective if math.isfinite(sol.objective) else sol.objective
        return prep.result(self.name, sol.choice, objective, sol.backend)

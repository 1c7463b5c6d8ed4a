"""Round policies for elastic training jobs (OAK and its baselines) and the goodput model.

Pure code: plain data in, plain data out, no clock and no I/O beyond reading the packaged
fitted-parameter file. Drivers build a `RoundInput`, call `policy.decide(...)` and act on the
`RoundResult`.
"""

from firepool.scheduling.errors import (
    InvalidGoodputError,
    InvalidRoundInputError,
    SchedulingError,
    SolverFailedError,
    SolverUnavailableError,
    UnknownApplicationError,
    UnknownPolicyError,
)
from firepool.scheduling.estimates import (
    GpuSpec,
    ThroughputObservation,
    candidate_configurations,
    estimate_goodputs,
)
from firepool.scheduling.goodput import AppModel, app_model, app_models, fit_reports
from firepool.scheduling.milp import available_backends
from firepool.scheduling.policies.drf import DrfPolicy
from firepool.scheduling.policies.gavel import GavelPolicy
from firepool.scheduling.policies.hybrid import OakNsga2Policy
from firepool.scheduling.policies.oak import OakPolicy
from firepool.scheduling.policies.pollux import PolluxPolicy
from firepool.scheduling.policies.sia import SIA_PAPER, SIA_REFERENCE, SiaParams, SiaPolicy
from firepool.scheduling.registry import POLICY_NAMES, make_policy
from firepool.scheduling.rounds import (
    Configuration,
    JobRoundState,
    RoundInput,
    RoundPolicy,
    RoundResult,
)
from firepool.scheduling.utility import (
    P_RESTART_S,
    OakParams,
    age_key,
    aggregate_restart_factor,
    p_restart_for,
    restart_factor,
)

__all__ = [
    "POLICY_NAMES",
    "P_RESTART_S",
    "SIA_PAPER",
    "SIA_REFERENCE",
    "AppModel",
    "Configuration",
    "DrfPolicy",
    "GavelPolicy",
    "GpuSpec",
    "InvalidGoodputError",
    "InvalidRoundInputError",
    "JobRoundState",
    "OakNsga2Policy",
    "OakParams",
    "OakPolicy",
    "PolluxPolicy",
    "RoundInput",
    "RoundPolicy",
    "RoundResult",
    "SchedulingError",
    "SiaParams",
    "SiaPolicy",
    "SolverFailedError",
    "SolverUnavailableError",
    "ThroughputObservation",
    "UnknownApplicationError",
    "UnknownPolicyError",
    "age_key",
    "aggregate_restart_factor",
    "app_model",
    "app_models",
    "available_backends",
    "candidate_configurations",
    "estimate_goodputs",
    "fit_reports",
    "make_policy",
    "p_restart_for",
    "restart_factor",
]

"""Plain data in and out of a round policy.

Everything a policy needs arrives in one `RoundInput` and everything it decides leaves in one
`RoundResult`, so the service and the simulator drive the very same code and tests can build
rounds by hand. Times are seconds; `now` never enters a policy: the caller measures the
durations (`t_progress`, `t_ckpt`, `t_queue`, `age_s`) and passes them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from firepool.scheduling.errors import InvalidRoundInputError


@dataclass(frozen=True, slots=True)
class Configuration:
    """One way to run a job: `replicas` GPUs of one `gpu_type`, spread over `nodes` nodes."""

    gpu_type: str
    replicas: int
    nodes: int = 1

    def __post_init__(self) -> None:
        if not self.gpu_type:
            raise InvalidRoundInputError("configuration needs a GPU type", field="gpu_type")
        if self.replicas < 1:
            raise InvalidRoundInputError("replicas must be >= 1", field="replicas")
        if not 1 <= self.nodes <= self.replicas:
            raise InvalidRoundInputError("nodes must be in 1..replicas", field="nodes")

    def __str__(self) -> str:
        return f"{self.replicas}x{self.gpu_type}"


@dataclass(frozen=True, slots=True)
class JobRoundState:
    """One active elastic job as a policy sees it.

    `configurations` are the candidates that survived the memory filter; `goodputs[k]` is the
    goodput estimate of `configurations[k]`, normalised so that 1.0 is the job's goodput on one
    reference GPU (the scale the paper's `mu_na = 1.1` is meant for). `p_restart` of None means
    "look the application up in the paper's table".

    `t_ckpt` is all measured checkpoint and restore time; `t_ckpt_failures` the part of it spent
    restoring after a *failed* attempt (the paper's section IV-D charges failures only, while a
    policy's own resizes would otherwise feed back into its restart factor). `failures` counts
    failed attempts (a subset of `restarts`). `restoring` is True while the current attempt has
    started but not yet reported progress: Sia pins such a job to its configuration, since moving
    it would throw the restore away.
    """

    job_id: str
    configurations: tuple[Configuration, ...]
    goodputs: tuple[float, ...]
    app: str = ""
    t_progress: float = 0.0
    t_ckpt: float = 0.0
    t_queue: float = 0.0
    p_restart: float | None = None
    current: Configuration | None = None
    age_s: float = 0.0
    restarts: int = 0
    failures: int = 0
    t_ckpt_failures: float = 0.0
    restoring: bool = False
    remaining_work: float = 3600.0  # seconds of work on one reference GPU (Gavel only)


@dataclass(frozen=True, slots=True)
class RoundInput:
    """Capacity per GPU type and the active elastic jobs of one round."""

    capacity: Mapping[str, int]
    jobs: tuple[JobRoundState, ...]
    round_s: float = 60.0


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One configuration or None per job, plus the jobs that could not be placed at all.

    `infeasible` maps a job to the reason none of its configurations can ever run here (e.g.
    every one needs more GPUs of a type than the cluster has); such a job also appears in
    `assignments` with None, so no job is silently dropped.
    """

    policy: str
    assignments: Mapping[str, Configuration | None]
    infeasible: Mapping[str, str] = field(default_factory=dict)
    objective: float = 0.0
    solver: str = ""

    def used(self) -> dict[str, int]:
        """GPUs used per type by the assignment."""
        out: dict[str, int] = {}
        for cfg in self.assignments.values():
            if cfg is not None:
                out[cfg.gpu_type] = out.get(cfg.gpu_type, 0) + cfg.replicas
        return out


class RoundPolicy(Protocol):
    """Anything that turns a round input into a round result."""

    @property
    def name(self) -> str: ...

    def decide(self, round_input: RoundInput) -> RoundResult: ...

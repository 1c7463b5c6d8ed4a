"""A hardware pool (SKU): its spec, the accelerator models it may name, its lease-tag and
network modes."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, ValidationError, model_validator

from firepool.model.base import StrictModel, _first_loc
from firepool.model.errors import ConfigError
from firepool.model.images import image_reference_problem, image_repository


class LeaseTagMode(StrEnum):
    BOUNDARY = "boundary"
    HINT = "hint"


class NetworkAccess(StrEnum):
    """What a pool's jobs may reach over the network (the pod's namespace, agent/netns.py)."""

    #: Their own loopback only.
    NONE = "none"
    #: Public addresses too, through a NAT; never the host, its neighbours or private ranges.
    EGRESS = "egress"
    #: No network isolation: pods reach each other and whatever the host's network reaches
    #: (local pods share the host's; on Kubernetes the pod-isolating NetworkPolicy skips them).
    #: What a gang spanning pods needs: its ranks rendezvous over TCP.
    HOST = "host"


# --------------------------------------------------------------------------- accelerators

#: Accelerator models a pool may name, with memory per device in GiB. `fake` is a configured
#: stand-in device for machines without GPUs (CI, the simulator's local venue).
ACCELERATORS: dict[str, int] = {
    "H200": 141,
    "H100": 80,
    "A100-80GB": 80,
    "A100": 40,
    "L40S": 48,
    "L4": 24,
    "A10G": 24,
    "T4": 16,
    "V100": 32,
    "fake": 16,
}

#: The ledger key for CPU pools; their budget is counted in cores.
CPU_RESOURCE = "cpu"


class PoolSpec(StrictModel):
    """A hardware pool (SKU): one pod shape, one base image and the four scaling knobs.

    Floor, idle cap and ceiling count pods; a pod of a GPU pool holds `accelerators_per_pod`
    physical GPUs, and an active pod with its standbys counts once. Budgets convert pods to
    GPUs (or cores, for CPU pools) so that 1-GPU and 8-GPU pools share one ledger.
    """

    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]
    accelerator: str | None = None
    accelerators_per_pod: int = 0
    cpus_per_pod: float = 1.0
    memory_mib_per_pod: int = 2048
    image: str = "firepool/base:latest"
    min_count: int = 0
    max_idle_count: int = 0
    max_count: int = 8
    idle_timeout: float = 60.0
    caller_hold_seconds: float | None = None
    standbys_per_active: int = 0
    step: int = 8
    lease_tag_mode: LeaseTagMode = LeaseTagMode.BOUNDARY
    max_pods_per_caller: int | None = None
    max_gpus_per_caller: int | None = None
    template_version: int = 1
    preload_modules: tuple[str, ...] = ()
    #: Custom images a job of this pool may name: exact digest-pinned references
    #: (`repo@sha256:...`) or repository prefixes (`registry/team/trainer` admits that
    #: repository at any tag or digest and every repository below it). Empty: none.
    allowed_images: tuple[str, ...] = ()
    #: What its jobs may reach over the network (loopback only by default).
    network: NetworkAccess = NetworkAccess.NONE

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        """Turn pydantic's generic error into a ConfigError that names the field."""
        try:
            return handler(data)
        except ValidationError as err:
            field, msg = _first_loc(err)
            raise ConfigError(f"pool spec: {field}: {msg}", field=field) from None

    @model_validator(mode="after")
    def _check(self) -> PoolSpec:
        for field in (
            "accelerators_per_pod",
            "memory_mib_per_pod",
            "min_count",
            "max_idle_count",
            "max_count",
            "standbys_per_active",
            "template_version",
        ):
            if getattr(self, field) < 0:
                raise ConfigError(f"pool {self.name}: {field} must be >= 0", field=field)
        for field in ("cpus_per_pod", "idle_timeout"):
            if not getattr(self, field) >= 0:  # also refuses NaN
                raise ConfigError(f"pool {self.name}: {field} must be >= 0", field=field)
        if self.caller_hold_seconds is not None and not self.caller_hold_seconds >= 0:
            raise ConfigError(
                f"pool {self.name}: caller_hold_seconds must be >= 0", field="caller_hold_seconds"
            )
        for field in ("max_pods_per_caller", "max_gpus_per_caller"):
            value = getattr(self, field)
            if value is not None and value < 1:
                raise ConfigError(f"pool {self.name}: {field} must be >= 1", field=field)
        if self.step < 1:
            raise ConfigError(f"pool {self.name}: step must be >= 1", field="step")
        for i, entry in enumerate(self.allowed_images):
            bare = entry.rstrip("/")
            problem = image_reference_problem(bare) if bare else "an empty entry"
            if problem is None and "@" not in bare and bare != image_repository(bare):
                problem = f"{entry!r} has a tag: allow a repository or a digest-pinned image"
            if problem is not None:
                raise ConfigError(
                    f"pool {self.name}: allowed_images[{i}]: {problem}",
                    field=f"allowed_images.{i}",
                )
        if self.min_count > self.max_count:
            raise ConfigError(
                f"pool {self.name}: min_count {self.min_count} exceeds max_count {self.max_count}",
                field="min_count",
            )
        if self.accelerator is None:
            if self.accelerators_per_pod:
                raise ConfigError(
                    f"pool {self.name}: accelerators_per_pod needs an accelerator",
                    field="accelerators_per_pod",
                )
            if self.standbys_per_active:
                raise ConfigError(
                    f"pool {self.name}: standbys need a GPU pool", field="standbys_per_active"
                )
            if self.max_gpus_per_caller is not None:
                raise ConfigError(
                    f"pool {self.name}: max_gpus_per_caller needs a GPU pool",
                    field="max_gpus_per_caller",
                )
            if self.cpus_per_pod <= 0:
                raise ConfigError(
                    f"pool {self.name}: a CPU pool needs cpus_per_pod > 0", field="cpus_per_pod"
                )
        else:
            if self.accelerator not in ACCELERATORS:
                known = ", ".join(sorted(ACCELERATORS))
                raise ConfigError(
                    f"pool {self.name}: unknown accelerator {self.accelerator!r} (known: {known})",
                    field="accelerator",
                )
            if self.accelerators_per_pod < 1:
                raise ConfigError(
                    f"pool {self.name}: a GPU pool needs accelerators_per_pod >= 1",
                    field="accelerators_per_pod",
                )
            if self.standbys_per_active and self.accelerators_per_pod != 1:
                raise ConfigError(
                    f"pool {self.name}: standbys need 1-GPU pods (gang promotion is not supported)",
                    field="standbys_per_active",
                )
        return self

    @property
    def is_gpu(self) -> bool:
        return self.accelerator is not None

    @property
    def hold_seconds(self) -> float:
        """The owner hold: `caller_hold_seconds`, inheriting the keep-alive when unset."""
        return self.idle_timeout if self.caller_hold_seconds is None else self.caller_hold_seconds

    @property
    def budget_resource(self) -> str:
        """The ledger this pool draws from: its accelerator model, or `cpu`."""
        return self.accelerator if self.accelerator is not None else CPU_RESOURCE

    @property
    def units_per_pod(self) -> int:
        """Budget units one pod (or one active+standby group) takes: GPUs, or whole cores."""
        if self.accelerator is not None:
            return self.accelerators_per_pod
        return max(1, int(-(-self.cpus_per_pod // 1)))


# --------------------------------------------------------------------------- environment

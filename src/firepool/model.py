"""Value types shared by every layer: job and pod states, pool specs, typed errors.

Everything here is plain data. The control plane (`control/`, `scheduling/`), the adapters
(`store/`, `backends/`), the drivers (`service/`, `sim/`) and the faces (`api/`, `client/`,
`cli/`) all speak these types, so a rule written once holds everywhere: an invalid pool spec
is refused the same way whether it comes from a catalog file, the API or a simulator sweep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

# --------------------------------------------------------------------------- enums


class JobState(StrEnum):
    PENDING = "PENDING"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL_JOB_STATES


_TERMINAL_JOB_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

#: Every legal job transition. RUNNING -> QUEUED is a retry or a crash-recovery re-queue; the
#: durable store refuses anything else, so a stale writer can never resurrect a finished job.
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.QUEUED, JobState.FAILED, JobState.CANCELLED}),
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {JobState.QUEUED, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class PodRole(StrEnum):
    ACTIVE = "active"
    STANDBY = "standby"


class PodState(StrEnum):
    STARTING = "starting"
    IDLE = "idle"
    HELD = "held"
    ASSIGNED = "assigned"
    RUNNING = "running"
    RETIRING = "retiring"
    STALE = "stale"


class AcquisitionPath(StrEnum):
    WARM = "warm"
    RECYCLED = "recycled"
    STANDBY = "standby"
    NEW = "new"
    CUSTOM_IMAGE = "custom_image"


class AcquisitionReason(StrEnum):
    """Why a job got the path it got, i.e. why no warmer path was used."""

    SAME_SESSION = "same_session"  # warm: the caller's own pod, same queue and tag
    TAG_HINT = "tag_hint"  # warm: own pod, other tag, pool treats tags as hints
    NEW_SESSION = "new_session"  # recycled: own pod across a tag boundary, then retires
    QUEUE_SWITCH = "queue_switch"  # recycled: own pod across a queue boundary, then retires
    NO_OWN_POD = "no_own_pod"  # warm: a never-used pod, the caller had no idle pod here
    NO_IDLE_POD = "no_idle_pod"  # standby: no own or never-used idle pod was free
    NO_WARM_CAPACITY = "no_warm_capacity"  # new: nothing idle or standby when the job queued
    SINGLE_USE = "single_use"  # new: the job asked for a pod of its own
    CUSTOM_IMAGE = "custom_image"  # custom_image: the job brings its own image


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


class Topology(StrEnum):
    NONE = "none"
    TORCHRUN = "torchrun"
    RAY = "ray"


class JobKind(StrEnum):
    TASK = "task"
    ELASTIC = "elastic"


class TokenRole(StrEnum):
    """What a token may do: a `caller` submits and sees its own jobs and pods; an `admin`
    also changes pools and sees every caller's pods in full."""

    CALLER = "caller"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token authenticates: the caller it acts for and the role it holds."""

    caller: str
    role: TokenRole = TokenRole.CALLER

    @property
    def admin(self) -> bool:
        return self.role is TokenRole.ADMIN


class ErrorCode(StrEnum):
    """Stable error classes: every error a caller can see carries one of these.

    The first group describes rejected requests and refused operations; the second group is the
    `error_class` of a terminal job. The strings are a public contract: never rename one.
    """

    VALIDATION = "ValidationError"
    FORBIDDEN_ENV = "ForbiddenEnv"
    UNAUTHORIZED = "Unauthorized"
    FORBIDDEN = "Forbidden"
    NOT_FOUND = "NotFound"
    CONFLICT = "Conflict"
    LOST_RACE = "LostRace"
    INVALID_TRANSITION = "InvalidTransition"
    PAYLOAD_TOO_LARGE = "PayloadTooLarge"
    BAD_PACKAGE = "BadPackage"
    CONFIG = "ConfigError"
    UNKNOWN_POOL = "UnknownPool"
    IMAGE_NOT_ALLOWED = "ImageNotAllowed"
    QUOTA = "QuotaExceeded"
    UNAVAILABLE = "Unavailable"
    STORE_UNAVAILABLE = "StoreUnavailable"
    INTERNAL = "InternalError"
    # terminal job error classes
    NON_ZERO_EXIT = "NonZeroExit"
    OOM = "OOM"
    KILLED = "Killed"
    TIMEOUT = "Timeout"
    CANCELLED = "Cancelled"
    LAUNCH_FAILED = "LaunchFailed"
    DEPENDENCY_INSTALL_FAILED = "DependencyInstallFailed"
    POD_LOST = "PodLost"
    UNSCHEDULABLE = "Unschedulable"  # an elastic job no configuration of which can ever run
    # the error class of an elastic attempt the round policy ended to resize or preempt it
    PREEMPTED = "Preempted"
    # an attempt stopped because the borrowed capacity it ran on went back to its owner:
    # always retried, never counted against `max_retries`
    RECLAIMED = "Reclaimed"


# --------------------------------------------------------------------------- errors


class FirepoolError(Exception):
    """Base of every typed error: a stable code, a message, and the offending field if any."""

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, str | None]:
        return {"error": self.code.value, "message": self.message, "field": self.field}


class ConfigError(FirepoolError):
    code = ErrorCode.CONFIG


class RequestValidationError(FirepoolError):
    code = ErrorCode.VALIDATION


class ForbiddenEnvError(FirepoolError):
    code = ErrorCode.FORBIDDEN_ENV


class UnauthorizedError(FirepoolError):
    code = ErrorCode.UNAUTHORIZED


class ForbiddenError(FirepoolError):
    """An authenticated token whose role does not allow the operation (nothing was changed)."""

    code = ErrorCode.FORBIDDEN


class NotFoundError(FirepoolError):
    code = ErrorCode.NOT_FOUND


class ConflictError(FirepoolError):
    code = ErrorCode.CONFLICT


class LostRaceError(FirepoolError):
    """A conditional write found the row changed under it; the caller must re-read."""

    code = ErrorCode.LOST_RACE


class InvalidTransitionError(FirepoolError):
    code = ErrorCode.INVALID_TRANSITION


class PayloadTooLargeError(FirepoolError):
    code = ErrorCode.PAYLOAD_TOO_LARGE


class BadPackageError(FirepoolError):
    code = ErrorCode.BAD_PACKAGE


class UnknownPoolError(FirepoolError):
    code = ErrorCode.UNKNOWN_POOL


class ImageNotAllowedError(FirepoolError):
    """The job names an image that its pool's allowlist does not admit."""

    code = ErrorCode.IMAGE_NOT_ALLOWED


class QuotaExceededError(FirepoolError):
    code = ErrorCode.QUOTA


class UnavailableError(FirepoolError):
    code = ErrorCode.UNAVAILABLE


class StoreUnavailableError(UnavailableError):
    """The database cannot take this request now (server down or restarting, connection
    lost, SQLite locked by another writer, disk full). Nothing of the request was written
    unless a retry finds it (a submission's `request_id`); `retry_after_s` is the broker's
    hint, sent as `Retry-After`."""

    code = ErrorCode.STORE_UNAVAILABLE

    def __init__(
        self, message: str, *, field: str | None = None, retry_after_s: float = 1.0
    ) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s


# --------------------------------------------------------------------------- strict base


class StrictModel(BaseModel):
    """The one pydantic base: unknown fields are errors, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


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


def _first_loc(err: ValidationError) -> tuple[str | None, str]:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or None
    return loc, first["msg"]


#: An image reference: a repository path, then an optional `:tag` or `@sha256:<digest>`.
_IMAGE_REF = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._/-]*(:[0-9]+/[A-Za-z0-9._/-]+)?"  # registry port, then the path
    r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
_IMAGE_PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")


def image_reference_problem(ref: str) -> str | None:
    """Why `ref` is not an image reference (`repo[:tag][@sha256:<64 hex>]`), or None."""
    if _IMAGE_REF.match(ref) is None:
        return (
            f"{ref!r} is not an image reference: expected repository[:tag] or "
            "repository@sha256:<64 hex digits>"
        )
    return None


def image_is_pinned(ref: str) -> bool:
    """A reference pinned by digest names one immutable image; a tag may move."""
    return _IMAGE_PINNED.search(ref) is not None


def image_repository(ref: str) -> str:
    """The repository of a reference, without its digest or tag (a registry port stays)."""
    ref = ref.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return ref[:colon] if colon > slash else ref


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

_FORBIDDEN_ENV_EXACT = frozenset(
    {
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
        "PYTHONUSERBASE",
        "PYTHONEXECUTABLE",
        "PYTHONSAFEPATH",
        "PYTHONNOUSERSITE",
        "PYTHONPLATLIBDIR",
        "PYTHONBREAKPOINT",
        "PYTHONWARNINGS",
        "PYTHONDEVMODE",
        "PYTHONMALLOC",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "BASH_ENV",
        "ENV",
        "IFS",
        "PATH",
        "HOME",
        "TMPDIR",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "NODE_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RAY_ADDRESS",
    }
)
_FORBIDDEN_ENV_PREFIXES = (
    "LD_",
    "DYLD_",
    "CUDA_DEVICE_MEMORY_",
    "FIREPOOL_",
    "TORCHELASTIC_",
    "TORCH_ELASTIC_",
    "PET_",
    "GLIBC_",
    "MALLOC_",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def forbidden_env_reason(name: str) -> str | None:
    """Why a caller may not set this environment variable, or None if it may.

    Loader hooks, interpreter start-up hooks, the broker's own variables and the rank and
    rendezvous variables the executor injects are refused: each could change what runs in the
    pod or how it joins a gang, behind the agent's back.
    """
    if not _ENV_NAME.match(name):
        return "not a valid environment variable name"
    upper = name.upper()
    if upper in _FORBIDDEN_ENV_EXACT:
        return "reserved for the broker, the loader or the interpreter"
    for prefix in _FORBIDDEN_ENV_PREFIXES:
        if upper.startswith(prefix):
            return f"names starting with {prefix} are reserved"
    return None


# --------------------------------------------------------------------------- jobs

_DIGEST = r"^sha256:[0-9a-f]{64}$"


#: Applications with a fitted goodput model (`scheduling/data/goodput_params.json`); kept here
#: so that validating a job needs no scheduling code. A test checks the two agree.
ELASTIC_APPS: frozenset[str] = frozenset(
    {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
)


class ElasticSpec(StrictModel):
    """How an elastic training job may be sized: the round policy picks its world size (pods,
    one rank each) between `min_pods` and `max_pods` every round, and resizes it by a graceful
    stop and a new attempt that resumes from the job's checkpoint directory.

    `app` names the fitted goodput model used as the prior until the job reports its own
    throughput (one of bert, cifar10, deepspeech2, imagenet, ncf, yolov3); `p_restart_s`
    overrides the paper's per-application restart penalty.
    """

    app: Annotated[str, Field(min_length=1, max_length=64)]
    min_pods: Annotated[int, Field(ge=1, le=1024)] = 1
    max_pods: Annotated[int, Field(ge=1, le=1024)] = 8
    p_restart_s: Annotated[float, Field(ge=0, le=86400, allow_inf_nan=False)] | None = None

    @field_validator("app")
    @classmethod
    def _known_app(cls, app: str) -> str:
        known = sorted(ELASTIC_APPS)
        if app.lower() not in known:
            raise PydanticCustomError(
                "unknown_app",
                "no fitted goodput model for {app}; choose from {known}",
                {"app": app, "known": ", ".join(known)},
            )
        return app.lower()

    @field_validator("max_pods")
    @classmethod
    def _ordered(cls, max_pods: int, info: ValidationInfo) -> int:
        low = info.data.get("min_pods")
        if low is not None and max_pods < low:
            raise PydanticCustomError(
                "pods_order",
                "max_pods {high} is below min_pods {low}",
                {"high": max_pods, "low": low},
            )
        return max_pods


class JobSpec(StrictModel):
    """What a caller asks for. The caller's identity is never part of it: auth supplies it."""

    pool: Annotated[str, Field(min_length=1, max_length=63)]
    command: Annotated[list[Annotated[str, Field(max_length=65536)]], Field(min_length=1)]
    package: Annotated[str, Field(pattern=_DIGEST)] | None = None
    requirements: Annotated[str, Field(max_length=1_000_000)] | None = None
    env: dict[str, Annotated[str, Field(max_length=65536)]] = Field(default_factory=dict)
    pods: Annotated[int, Field(ge=1, le=1024)] = 1
    topology: Topology = Topology.NONE
    queue: Annotated[str, Field(min_length=1, max_length=128)] = "default"
    lease_tag: Annotated[str, Field(max_length=256)] = ""
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    max_retries: Annotated[int, Field(ge=0, le=100)] = 0
    timeout_s: Annotated[float, Field(gt=0, le=30 * 24 * 3600)] | None = 600.0
    single_use: bool = False
    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    request_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    kind: JobKind = JobKind.TASK
    elastic: Annotated[ElasticSpec | None, Field(validate_default=True)] = None

    @field_validator("elastic")
    @classmethod
    def _elastic_matches_kind(
        cls, elastic: ElasticSpec | None, info: ValidationInfo
    ) -> ElasticSpec | None:
        kind = info.data.get("kind")
        if kind is not JobKind.ELASTIC:
            if elastic is not None:
                raise PydanticCustomError(
                    "elastic_on_task", "only a job of kind 'elastic' takes an elastic section", {}
                )
            return None
        if elastic is None:
            raise PydanticCustomError(
                "elastic_missing",
                "an elastic job needs an elastic section (app, min_pods, max_pods)",
                {},
            )
        if info.data.get("pods", 1) != 1:
            raise PydanticCustomError(
                "elastic_pods",
                "an elastic job is sized by the round policy: set elastic.min_pods and "
                "elastic.max_pods, not pods",
                {},
            )
        if info.data.get("topology") is Topology.RAY:
            raise PydanticCustomError(
                "elastic_topology", "elastic jobs run with torchrun's rank variables, not ray", {}
            )
        return elastic

    @field_validator("env")
    @classmethod
    def _filter_env(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            reason = forbidden_env_reason(name)
            if reason is not None:
                raise PydanticCustomError(
                    "forbidden_env",
                    "environment variable {name} is not allowed: {reason}",
                    {"name": name, "reason": reason},
                )
        return env

    @field_validator("image")
    @classmethod
    def _image_reference(cls, image: str | None) -> str | None:
        if image is not None:
            problem = image_reference_problem(image)
            if problem is not None:
                raise PydanticCustomError("bad_image", problem, {})
        return image

    @property
    def image_is_pinned(self) -> bool:
        """A digest-pinned custom image may be reused by its caller; a mutable tag may not."""
        return self.image is not None and image_is_pinned(self.image)


def attempt_id(job_id: str, retry: int) -> str:
    """The id the pod agent sees: `<job-id>:<retry>`, so a retry is never mistaken for its
    predecessor."""
    return f"{job_id}:{retry}"


def parse_attempt_id(value: str) -> tuple[str, int]:
    job_id, sep, retry = value.rpartition(":")
    if not sep or not job_id or not retry.isdigit():
        raise RequestValidationError(f"bad attempt id {value!r}", field="attempt")
    return job_id, int(retry)


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod as the broker tracks it (the route hides other callers' sessions)."""

    name: str
    pool: str
    role: str
    state: str
    owner: str | None
    queue: str | None
    tag: str | None
    group: str | None
    job: str | None
    hold_until: float
    created_at: float
    isolation: str = ""
    image: str | None = None  # a custom image; None: the pool's own
    pid_namespace: bool | None = None
    network: str = ""


@dataclass(frozen=True, slots=True)
class PoolStats:
    """One pool's figures at one instant, read by the API's metrics collector at scrape time
    (the broker computes them from its live state, so a scrape never touches the store).

    `pods` counts pods by (role, state); `held_pod_seconds` / `held_gpu_seconds` are running
    totals (an active pod and its standbys count as one GPU); `queued` is the pool's queue
    depth; budgets are per accelerator model (`cpu` for CPU pools), `limit` None when unset.
    """

    pool: str
    floor: int
    idle_cap: int
    ceiling: int
    pods: dict[tuple[str, str], int]
    held_pod_seconds: float
    held_gpu_seconds: float
    queued: int
    budget_resource: str
    budget_used: int
    budget_limit: int | None


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    """One sample of the broker's capacity and start latency, for the dashboard's plots:
    pods held and busy over every pool at `at`, and the start latency (submission to first
    instruction) percentiles of the attempts that ended since the previous sample (None when
    none did)."""

    at: float
    held: int
    busy: int
    starts: int
    start_p50: float | None
    start_p90: float | None
    start_p99: float | None


@dataclass(frozen=True, slots=True)
class RoundAllocation:
    """What one elastic round gave each job it considered: pods (0 for none this round)."""

    round: int
    at: float
    policy: str
    pods: dict[str, int]

"""The tracker's records and the plain-data results it hands back to drivers.

Results are NamedTuples rather than frozen dataclasses: they are built on the claim path, where
a frozen dataclass's per-field `object.__setattr__` costs more than the whole index update.
The two built on every claim, `Lease` and `LeasedPod`, are slotted dataclasses instead: a
NamedTuple's `__new__` is Python code too, and the two of them took about a fifth of a claim
(0.55 µs against 0.33 µs, `bench tracker`'s one-claimer loop). Nothing changes them once the
tracker has returned them.

`Pod` and `Group` are the tracker's own mutable records (slotted, about 0.5 KiB each with
their index entries, so 100,000 pods fit in well under 100 MiB). Drivers and the scaler may
read them but change them only through the tracker, which keeps every index in step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from firepool.model import (
    AcquisitionPath,
    AcquisitionReason,
    JobSpec,
    PodRole,
    PodState,
    attempt_id,
)
from firepool.model.frozen_init import fast_frozen_init


class RetireReason(StrEnum):
    SESSION_BOUNDARY = "session_boundary"  # a recycled pod ran its one job across a boundary
    UNCLEAN_RESET = "unclean_reset"
    HOLD_EXPIRED = "hold_expired"
    HOLD_BROKEN = "hold_broken"
    SINGLE_USE = "single_use"
    CUSTOM_IMAGE = "custom_image"  # a mutable-tag custom image never serves twice
    STALE_TEMPLATE = "stale_template"
    SCALE_DOWN = "scale_down"
    POD_FAILED = "pod_failed"
    RECLAIMED = "reclaimed"  # borrowed capacity its owner took back


class WaitReason(StrEnum):
    """Why a claim found nothing: the job stays queued and the scaler sees it as demand."""

    NO_CAPACITY = "no_capacity"
    CALLER_POD_LIMIT = "caller_pod_limit"
    CALLER_GPU_LIMIT = "caller_gpu_limit"
    #: Behind an older gang that reserves the pool's free pods (control/reservations.py).
    GANG_RESERVED = "gang_reserved"
    #: The session's own pod is being reset after its last job, whose verdict is already
    #: out: it comes back held for the session within milliseconds (not demand for a pod).
    OWN_POD_RESETTING = "own_pod_resetting"


class Pod:
    """One tracked pod. Slotted: this record is the tracker's per-pod memory cost."""

    __slots__ = (
        "created_at",
        "dedicated",
        "gated",
        "group",
        "held_key",
        "hold_until",
        "idle_since",
        "image",
        "job",
        "name",
        "owner",
        "pool",
        "queue",
        "retire_after",
        "role",
        "single_use",
        "solo",
        "state",
        "tag",
        "template",
        "used",
    )

    def __init__(
        self,
        name: str,
        pool: str,
        *,
        role: PodRole,
        group: str | None,
        created_at: float,
        template: int,
        single_use: bool,
        image: str | None,
    ) -> None:
        self.name = name
        self.solo = (name,)  # the pod set of a one-pod job, built once rather than per claim
        self.pool = pool
        self.role = role
        self.group = group
        self.state = PodState.STARTING
        self.created_at = created_at
        self.idle_since = created_at
        self.template = template
        self.single_use = single_use
        self.image = image
        # Created for one kind of job (single-use or a custom image): never shared supply.
        self.dedicated = single_use or image is not None
        self.owner: str | None = None
        self.queue: str | None = None
        self.tag: str | None = None
        self.used = False
        self.job: str | None = None
        self.hold_until = 0.0
        self.retire_after: RetireReason | None = None
        self.gated = False
        #: While held: its bucket's session key (owner, queue, tag, image), built once when
        #: the hold starts so that the claim that takes the pod need not build it again.
        self.held_key: tuple[str, str, str, str | None] | None = None

    def __repr__(self) -> str:
        return f"Pod({self.name}, {self.pool}, {self.role}, {self.state}, owner={self.owner})"


class Group:
    """A physical GPU: its active pod and standbys, and the per-GPU gate.

    `gate` names the one pod allowed to run a job on this card; `waiting` the one claimed pod
    queued behind it. Only when the gate holder's job is reported gone does the gate pass on.
    """

    __slots__ = ("gate", "name", "pods", "pool", "waiting")

    def __init__(self, name: str, pool: str) -> None:
        self.name = name
        self.pool = pool
        self.pods: set[str] = set()
        self.gate: str | None = None
        self.waiting: str | None = None

    @property
    def busy(self) -> bool:
        return self.gate is not None or self.waiting is not None


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One job's request for its full pod set. `queued_at` tells a new pod from a warm one."""

    job: str
    caller: str
    pool: str
    queue: str = "default"
    tag: str = ""
    pods: int = 1
    single_use: bool = False
    image: str | None = None
    image_pinned: bool = False
    queued_at: float = 0.0
    # Derived once, when the request is built: the claim path only reads them.
    session: tuple[str, str, str, str | None] = field(init=False, repr=False, compare=False)
    simple: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "session", (self.caller, self.queue, self.tag, self.image))
        simple = self.pods == 1 and not self.single_use and self.image is None
        object.__setattr__(self, "simple", simple)


@dataclass(slots=True)
class LeasedPod:
    name: str
    path: AcquisitionPath
    reason: AcquisitionReason
    gated: bool  # waits for the per-GPU gate: launch only after the tracker promotes it


@dataclass(slots=True)
class Lease:
    job: str
    caller: str
    pool: str
    pods: tuple[LeasedPod, ...]

    @property
    def launchable(self) -> bool:
        return not any(p.gated for p in self.pods)


class Wait(NamedTuple):
    job: str
    reason: WaitReason


class Retired(NamedTuple):
    pod: str
    reason: RetireReason


class Promotion(NamedTuple):
    """A gated pod now holds its GPU's gate; `job_launchable` when the whole set is ungated."""

    job: str
    pod: str
    job_launchable: bool


@dataclass(slots=True)
class ReleaseResult:
    held: list[tuple[str, float]] = field(default_factory=list)  # (pod, hold until)
    retired: list[Retired] = field(default_factory=list)
    promoted: list[Promotion] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    """What a restarted broker knows of a pod from the backend's annotations."""

    name: str
    pool: str
    state: PodState
    created_at: float
    role: PodRole = PodRole.ACTIVE
    group: str | None = None
    template: int = 1
    single_use: bool = False
    image: str | None = None
    owner: str | None = None
    queue: str | None = None
    tag: str | None = None
    used: bool = False
    hold_until: float = 0.0
    idle_since: float | None = None
    job: str | None = None
    retire_after: RetireReason | None = None  # e.g. a recycled pod: retires after its job


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Ticket:
    """A job as the broker core knows it: who asked, for what, and which attempt is next.

    Built by a driver from its store's record; the core needs no store type.
    """

    job: str
    caller: str
    spec: JobSpec
    submitted_at: float
    retries: int = 0
    #: Earlier attempts that ended `Reclaimed`, as the store counted them: read back from the
    #: store (never kept in memory), so a restarted broker counts failures the same way.
    reclaims: int = 0

    @property
    def failures(self) -> int:
        """Earlier attempts that count against `max_retries`: a reclaim takes an attempt
        number but is the capacity owner's doing, never the job's failure."""
        return self.retries - self.reclaims

    @property
    def attempt(self) -> str:
        """The store's attempt id: distinct ids keep an old attempt out of a new one."""
        return attempt_id(self.job, self.retries)

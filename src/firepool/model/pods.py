"""Pod words and the read-only views of pods and pools: roles, states, how a job got its pod
(acquisition path and reason), and the snapshots the API, metrics and dashboard read."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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

"""The API's response bodies: the resource shapes the OpenAPI document publishes.

Requests use the shared `JobSpec`; everything here derives from the one strict base
(`StrictModel`, `extra="forbid"`), so clients generated from the document see closed objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

if TYPE_CHECKING:
    from firepool.store import JobRecord

from firepool.model import (
    AcquisitionPath,
    ErrorCode,
    JobErrorClass,
    JobSpec,
    JobState,
    PoolSpec,
    StrictModel,
)


class ProblemOut(StrictModel):
    error: ErrorCode
    message: str
    field: str | None = None


class ErrorOut(StrictModel):
    """`error`, `message` and `field` describe one problem; a rejected request also lists
    every problem found in `problems`."""

    error: ErrorCode
    message: str
    field: str | None = None
    problems: list[ProblemOut] | None = None


class PodOut(StrictModel):
    rank: int
    name: str
    pool: str
    acquisition: AcquisitionPath
    reason: str


class TimingsOut(StrictModel):
    submitted: float | None = None
    assigned: float | None = None
    started: float | None = None
    first_instruction: float | None = None
    finished: float | None = None


class JobOut(StrictModel):
    id: str
    state: JobState
    attempt: str
    version: int
    pool: str
    queue: str
    lease_tag: str
    request_id: str | None
    exit_code: int | None
    error_class: JobErrorClass | None
    message: str | None
    retries: int
    cancel_requested: bool
    pods: list[PodOut]
    timings: TimingsOut
    spec: JobSpec

    @classmethod
    def of(cls, job: JobRecord) -> JobOut:
        return cls.model_construct(
            id=job.id,
            state=job.state,
            attempt=job.attempt,
            version=job.version,
            pool=job.spec.pool,
            queue=job.spec.queue,
            lease_tag=job.spec.lease_tag,
            request_id=job.spec.request_id,
            exit_code=job.exit_code,
            error_class=job.error_class,
            message=job.message,
            retries=job.retries,
            cancel_requested=job.cancel_requested,
            pods=[
                PodOut.model_construct(
                    rank=p.rank, name=p.pod, pool=p.pool, acquisition=p.acquisition, reason=p.reason
                )
                for p in job.pods
            ],
            timings=TimingsOut.model_construct(None, **job.timings),
            spec=job.spec,
        )


class JobListOut(StrictModel):
    jobs: list[JobOut]
    next: str | None = None


class PackageOut(StrictModel):
    digest: str
    size: int
    created: bool


class RolloutOut(StrictModel):
    """How far a pool's pods are on its current template (`done` when no old pod is left):
    old pods wait idle to drain (`stale_idle`), finish their job first (`stale_busy`) or are
    being deleted (`retiring`)."""

    pool: str
    template_version: int
    pods: int
    current: int
    stale_idle: int
    stale_busy: int
    retiring: int
    done: bool
    #: The pool runs an admin's applied edit (kept in the store), not its catalog entry.
    edited: bool = False


class PoolListOut(StrictModel):
    pools: list[PoolSpec]
    #: Each pool's rollout progress (empty from an API without a broker).
    rollouts: list[RolloutOut] = Field(default_factory=list)


class PoolOut(StrictModel):
    """A pool as the broker runs it after an edit, and its rollout."""

    pool: PoolSpec
    rollout: RolloutOut


class LogsOut(StrictModel):
    job: str
    attempt: str
    offset: int
    next_offset: int
    size: int
    data: str
    complete: bool


class HealthOut(StrictModel):
    status: str


class PodView(StrictModel):
    """A pod in the pod list; owner and session only on the caller's own pods."""

    name: str
    pool: str
    role: str
    state: str
    owner: str | None = None  # shown only for the caller's own pods
    queue: str | None = None
    lease_tag: str | None = None
    group: str | None = None
    job: str | None = None
    hold_until: float | None = None
    created_at: float
    #: How the pod is isolated (`private` or `weak`, see docs/pod-agent.md); None if unknown.
    isolation: str | None = None
    #: The pod's custom image (None: the pool's own); `custom` on another caller's pod.
    image: str | None = None
    #: Whether its jobs run in a PID namespace of their own; None if unknown.
    pid_namespace: bool | None = None
    #: What its jobs reach over the network: `none` (their own loopback), `egress` (public
    #: addresses too) or `host` (the host's network: no network isolation); None if unknown.
    network: str | None = None


class PodList(StrictModel):
    pods: list[PodView] = Field(default_factory=list)


class ProgressIn(StrictModel):
    """A running attempt's progress report (sent by the job itself through the SDK).

    `attempt` names the attempt the report is about, so a late report of an attempt that was
    already resized away is recognised and ignored. `samples_per_s` is the measured throughput
    of the whole job (every rank together); `fraction` is training progress in [0, 1].
    """

    attempt: Annotated[str, Field(min_length=3, max_length=300)]
    step: Annotated[int, Field(ge=0)] | None = None
    samples_per_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    fraction: Annotated[float, Field(ge=0, le=1)] | None = None


class ProgressOut(StrictModel):
    """`accepted` is False for a stale attempt's report (it changed nothing)."""

    job: str
    attempt: str
    accepted: bool

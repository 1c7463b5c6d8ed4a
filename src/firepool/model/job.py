"""What a caller submits: the job spec, its elastic part, its kind and topology, and the
attempt id that names one execution of it."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from firepool.model.base import StrictModel
from firepool.model.env import forbidden_env_reason
from firepool.model.errors import RequestValidationError
from firepool.model.images import image_is_pinned, image_reference_problem


class Topology(StrEnum):
    NONE = "none"
    TORCHRUN = "torchrun"
    RAY = "ray"


class JobKind(StrEnum):
    TASK = "task"
    ELASTIC = "elastic"


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

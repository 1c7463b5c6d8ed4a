"""The one request/response layer under both clients: which route each SDK method calls, with
what query and body, and which API model its answer parses into.

`Client` and `AsyncClient` differ only in how they send a `Call`; everything that could drift
between them lives here. `ROUTES` is also what the API-compatibility test checks against the
served OpenAPI document, so a renamed route, parameter or field breaks a test, not a user.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypedDict, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from firepool.api.schemas import (
    JobListOut,
    JobOut,
    LogsOut,
    PackageOut,
    PodList,
    PoolListOut,
    PoolOut,
    ProgressIn,
    ProgressOut,
)
from firepool.client.errors import error_from_response
from firepool.model import ElasticSpec, JobKind, JobSpec, JobState, PoolSpec, Topology

ModelT = TypeVar("ModelT", bound=BaseModel)


class SubmitOptions(TypedDict, total=False):
    """Every optional field of a job submission (`JobSpec` less `pool` and `command`).

    `package` may also be a local directory or zip file (uploaded first, by digest);
    `requirements` may also be a path to a requirements file (its text is sent). `queue` and
    `lease_tag` default to the enclosing `session()`'s. An elastic training job sets
    `kind="elastic"` and `elastic={"app": ..., "min_pods": ..., "max_pods": ...}`.
    """

    package: str | os.PathLike[str] | None
    requirements: str | os.PathLike[str] | None
    env: Mapping[str, str]
    pods: int
    topology: Topology | str
    queue: str
    lease_tag: str
    priority: int
    max_retries: int
    timeout_s: float | None
    single_use: bool
    image: str | None
    request_id: str | None
    kind: JobKind | str
    elastic: ElasticSpec | Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # OpenAPI template, e.g. "/v1/jobs/{job_id}"
    query: frozenset[str] = frozenset()
    body: type[BaseModel] | None = None  # JSON request model
    raw_body: bool = False  # request body is bytes (a zip)
    result: type[BaseModel] | None = None


ROUTES: dict[str, Route] = {
    "submit": Route("POST", "/v1/jobs", body=JobSpec, query=frozenset({"wait_s"}), result=JobOut),
    "list": Route(
        "GET",
        "/v1/jobs",
        query=frozenset({"state", "pool", "queue", "limit", "after"}),
        result=JobListOut,
    ),
    "get": Route("GET", "/v1/jobs/{job_id}", query=frozenset({"wait_s"}), result=JobOut),
    "cancel": Route("POST", "/v1/jobs/{job_id}/cancel", result=JobOut),
    "progress": Route("POST", "/v1/jobs/{job_id}/progress", body=ProgressIn, result=ProgressOut),
    "logs": Route(
        "GET",
        "/v1/jobs/{job_id}/logs",
        query=frozenset({"attempt", "offset", "limit", "rank"}),
        result=LogsOut,
    ),
    "upload_package": Route("POST", "/v1/packages", raw_body=True, result=PackageOut),
    "pools": Route("GET", "/v1/pools", result=PoolListOut),
    "apply_pool": Route("PUT", "/v1/pools/{name}", body=PoolSpec, result=PoolOut),
    "pods": Route("GET", "/v1/pods", result=PodList),
}


@dataclass(frozen=True, slots=True)
class Call(Generic[ModelT]):
    """One HTTP exchange, described; the clients send it and hand the answer to `parse`."""

    method: str
    path: str
    result: type[ModelT]
    params: tuple[tuple[str, str | int], ...] = ()
    json: dict[str, Any] | None = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds the broker may hold the request on purpose (a long poll): added to the
    #: client's timeout so that a held request is not mistaken for a dead broker.
    hold_s: float = 0.0
    #: Safe to send again after a 503 (`client.retry`): reads and the idempotent writes.
    retry: bool = False

    def parse(self, response: httpx.Response) -> ModelT:
        if response.is_error:
            raise error_from_response(response)
        return self.result.model_validate_json(response.content)


#: Writes that may be sent twice with the effect of once: a submission (by its request id),
#: a cancel, a package upload (by its digest). Every GET may be repeated too.
IDEMPOTENT = frozenset({"submit", "cancel", "upload_package"})


def _call(name: str, result: type[ModelT], /, **path: str) -> Call[ModelT]:
    route = ROUTES[name]
    assert route.result is result, f"{name} answers {route.result}"
    url = route.path.format(**{k: quote(v, safe="") for k, v in path.items()})
    return Call(route.method, url, result, retry=route.method == "GET" or name in IDEMPOTENT)


def submit(body: Mapping[str, Any] | JobSpec, *, wait_s: float | None = None) -> Call[JobOut]:
    """A submission. A `JobSpec` is sent as validated; a mapping is sent as it is, so the
    broker (not the SDK) names a misspelt field. Without a `request_id` it gets a fresh one:
    a submission retried after a lost answer (a 503, the store restarting) then returns the
    job the first try created instead of queueing it twice. With `wait_s`, the broker holds
    the answer until the job is terminal or `wait_s` passed (`run`: one request for a short
    job)."""
    payload = body.model_dump(mode="json") if isinstance(body, JobSpec) else dict(body)
    if payload.get("request_id") is None:
        payload["request_id"] = f"sdk-{uuid.uuid4().hex}"
    call = _call("submit", JobOut)
    if not wait_s:
        return Call(call.method, call.path, JobOut, json=payload, retry=call.retry)
    params = (("wait_s", f"{wait_s:g}"),)
    return Call(
        call.method,
        call.path,
        JobOut,
        json=payload,
        params=params,
        hold_s=wait_s,
        retry=call.retry,
    )


def get(job_id: str, *, wait_s: float | None = None) -> Call[JobOut]:
    """The job; with `wait_s`, a long poll: the broker answers when the job is terminal or
    after `wait_s` seconds. (A broker older than long polls ignores it and answers at once.)"""
    call = _call("get", JobOut, job_id=job_id)
    if not wait_s:
        return call
    params = (("wait_s", f"{wait_s:g}"),)
    return Call(call.method, call.path, JobOut, params=params, hold_s=wait_s, retry=True)


def cancel(job_id: str) -> Call[JobOut]:
    return _call("cancel", JobOut, job_id=job_id)


def progress(job_id: str, report: ProgressIn) -> Call[ProgressOut]:
    call = _call("progress", ProgressOut, job_id=job_id)
    body = report.model_dump(mode="json", exclude_none=True)
    return Call(call.method, call.path, ProgressOut, json=body, retry=call.retry)


def list_jobs(
    *,
    state: JobState | str | Iterable[JobState | str] | None = None,
    pool: str | None = None,
    queue: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Call[JobListOut]:
    params: list[tuple[str, str | int]] = []
    states = [state] if isinstance(state, str) else list(state or ())
    params += [("state", str(s)) for s in states]
    if pool is not None:
        params.append(("pool", pool))
    if queue is not None:
        params.append(("queue", queue))
    if limit is not None:
        params.append(("limit", limit))
    if after is not None:
        params.append(("after", after))
    call = _call("list", JobListOut)
    return Call(call.method, call.path, JobListOut, params=tuple(params), retry=True)


def logs(
    job_id: str, *, attempt: int, offset: int, limit: int | None = None, rank: int = 0
) -> Call[LogsOut]:
    params: list[tuple[str, str | int]] = [("attempt", attempt), ("offset", offset)]
    if rank:
        params.append(("rank", rank))  # rank 0 is every server's default: leave it out
    if limit is not None:
        params.append(("limit", limit))
    call = _call("logs", LogsOut, job_id=job_id)
    return Call(call.method, call.path, LogsOut, params=tuple(params), retry=True)


def upload_package(data: bytes) -> Call[PackageOut]:
    call = _call("upload_package", PackageOut)
    return Call(
        call.method,
        call.path,
        PackageOut,
        content=data,
        headers={"Content-Type": "application/zip"},
        retry=True,
    )


def pools() -> Call[PoolListOut]:
    return _call("pools", PoolListOut)


def apply_pool(spec: PoolSpec) -> Call[PoolOut]:
    call = _call("apply_pool", PoolOut, name=spec.name)
    return Call(call.method, call.path, PoolOut, json=spec.model_dump(mode="json"))


def pods() -> Call[PodList]:
    return _call("pods", PodList)


def submit_body(
    pool: str,
    command: Sequence[str],
    options: SubmitOptions,
    *,
    package_digest: str | None,
    session: Mapping[str, str],
) -> dict[str, Any]:
    """The JSON body of `submit(...)`: the caller's options over the session's defaults, with
    a package path already replaced by its uploaded digest and a requirements path by its
    text. Fields the caller did not set are left to the broker's defaults."""
    if isinstance(command, str):
        raise TypeError("command is a list of arguments, e.g. ['python', 'main.py']")
    body: dict[str, Any] = {"pool": pool, "command": list(command)}
    body.update(session)
    for name, value in options.items():
        if name == "package":
            value = package_digest
        elif name == "requirements" and isinstance(value, os.PathLike):
            value = Path(value).read_text(encoding="utf-8")
        elif name == "env" and value is not None:
            value = dict(value)  # type: ignore[call-overload]
        elif isinstance(value, ElasticSpec):
            value = value.model_dump(mode="json")
        body[name] = value
    return body

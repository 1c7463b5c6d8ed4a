"""One error shape for every failure: `{"error": <stable class>, "message", "field"}`.

Typed `FirepoolError`s map to statuses here, in one table; pydantic's request errors become
`problems`, every one of them (a caller fixing a request should not find its mistakes one
round trip at a time), each with the field named the way a caller wrote it (`env.LD_PRELOAD`
for a forbidden variable, `pods` for a bad count) and, for an unknown field, the closest known
one ("unknown field 'comand'; did you mean 'command'?"). The top-level `error`, `message` and
`field` stay those of one problem (the first of a specific class, else the first), so callers
and the SDK that read only them keep working. Anything unexpected is a 500 whose body still has
the shape, so a program never has to parse an HTML or framework-default page.
"""

from __future__ import annotations

import difflib
import logging
import math
import types
import typing
from collections.abc import Sequence
from typing import Any, NamedTuple

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from firepool.model import ErrorCode, FirepoolError, StoreUnavailableError

log = logging.getLogger(__name__)

STATUS: dict[ErrorCode, int] = {
    ErrorCode.VALIDATION: 422,
    ErrorCode.FORBIDDEN_ENV: 422,
    ErrorCode.BAD_PACKAGE: 422,
    ErrorCode.UNKNOWN_POOL: 422,
    ErrorCode.CONFIG: 422,  # a pool spec a request carried (an admin's pool edit)
    ErrorCode.IMAGE_NOT_ALLOWED: 422,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.LOST_RACE: 409,
    ErrorCode.INVALID_TRANSITION: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.QUOTA: 429,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.STORE_UNAVAILABLE: 503,
}

_LOCATIONS = {"body", "query", "path", "header", "cookie"}


class Problem(NamedTuple):
    error: ErrorCode
    message: str
    field: str | None


def error_response(
    code: ErrorCode,
    message: str,
    field: str | None = None,
    *,
    status: int | None = None,
    problems: Sequence[Problem] = (),
    retry_after_s: float | None = None,
) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if code == ErrorCode.UNAUTHORIZED else {}
    if retry_after_s is not None:
        # Whole seconds (RFC 9110); at least 1, so a client never retries in a tight loop.
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    body: dict[str, Any] = {"error": code.value, "message": message, "field": field}
    if problems:
        body["problems"] = [
            {"error": p.error.value, "message": p.message, "field": p.field} for p in problems
        ]
    return JSONResponse(body, status_code=status or STATUS.get(code, 500), headers=headers)


def did_you_mean(name: str, known: Sequence[str], prefix: str = "") -> str:
    """The hint "; did you mean 'x'?" for the closest known name (written after `prefix`,
    the path to it), or "" when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {prefix + close[0]!r}?" if close else ""


def describe_validation(
    errors: list[Any], model: type[BaseModel] | None = None
) -> tuple[ErrorCode, str, str | None]:
    """The headline problem as (class, message, field)."""
    problems = validation_problems(errors, model)
    return headline(problems)


def headline(problems: Sequence[Problem]) -> tuple[ErrorCode, str, str | None]:
    """The problem the top-level fields describe: a specific class (a forbidden variable)
    before a generic validation error, so the SDK raises the most telling typed error; with
    several problems the message lists them all."""
    if not problems:
        return ErrorCode.VALIDATION, "invalid request", None
    first = next((p for p in problems if p.error is not ErrorCode.VALIDATION), problems[0])
    if len(problems) == 1:
        return first
    listed = "; ".join(p.message for p in problems)
    return first.error, f"{len(problems)} problems: {listed}", first.field


def validation_problems(errors: list[Any], model: type[BaseModel] | None = None) -> list[Problem]:
    """Every pydantic error as a problem; `model` (the request body's) names the known fields
    an unknown one is compared with."""
    problems = [_problem(error, model) for error in errors]
    if any(p.message == "request body is not valid JSON" for p in problems):
        return [Problem(ErrorCode.VALIDATION, "request body is not valid JSON", None)]
    return problems


def _problem(error: Any, model: type[BaseModel] | None) -> Problem:
    loc = [str(part) for part in error.get("loc", ())]
    if loc and loc[0] in _LOCATIONS:
        loc = loc[1:]
    field = ".".join(loc) or None
    kind = error.get("type", "")
    if kind == "forbidden_env":
        name = error.get("ctx", {}).get("name")
        return Problem(
            ErrorCode.FORBIDDEN_ENV, error.get("msg", "forbidden variable"), f"env.{name}"
        )
    if kind == "json_invalid":
        return Problem(ErrorCode.VALIDATION, "request body is not valid JSON", None)
    if kind == "extra_forbidden":
        parent = loc[:-1]
        prefix = "".join(f"{part}." for part in parent)
        hint = did_you_mean(loc[-1], known_fields(model, parent), prefix) if loc else ""
        return Problem(ErrorCode.VALIDATION, f"unknown field {field!r}{hint}", field)
    if kind == "missing" and field is None:
        return Problem(ErrorCode.VALIDATION, "request body is required", None)
    message = error.get("msg", "invalid value")
    return Problem(ErrorCode.VALIDATION, f"{field}: {message}" if field else message, field)


def known_fields(model: type[BaseModel] | None, path: Sequence[str]) -> list[str]:
    """The field names (and aliases) of the model found at `path` inside `model`, or [] when
    the path leads to no model (a dict's keys, a list's items, an unknown body)."""
    for part in path:
        if model is None:
            return []
        info = model.model_fields.get(part)
        model = _model_in(info.annotation) if info is not None else None
    if model is None:
        return []
    names = list(model.model_fields)
    names += [f.alias for f in model.model_fields.values() if f.alias and f.alias not in names]
    return names


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`X`, `X | None`, `Annotated[X, ...]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated or origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def body_model(request: Request) -> type[BaseModel] | None:
    """The pydantic model of the matched route's body, if it has one."""
    route = request.scope.get("route")
    info = getattr(getattr(route, "body_field", None), "field_info", None)
    return _model_in(getattr(info, "annotation", None))


def install(app: FastAPI) -> None:
    @app.exception_handler(FirepoolError)
    async def _typed(_request: Request, err: FirepoolError) -> JSONResponse:
        retry_after = err.retry_after_s if isinstance(err, StoreUnavailableError) else None
        if retry_after is not None:
            log.warning("store unavailable: %s", err.message)
        return error_response(err.code, err.message, err.field, retry_after_s=retry_after)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        problems = validation_problems(list(err.errors()), body_model(request))
        code, message, field = headline(problems)
        return error_response(code, message, field, problems=problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, err: StarletteHTTPException) -> JSONResponse:
        code = {401: ErrorCode.UNAUTHORIZED, 404: ErrorCode.NOT_FOUND}.get(
            err.status_code, ErrorCode.VALIDATION if err.status_code < 500 else ErrorCode.INTERNAL
        )
        return error_response(code, str(err.detail), None, status=err.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, err: Exception) -> JSONResponse:
        log.exception("unhandled error in the API")
        return error_response(ErrorCode.INTERNAL, "internal error", None, status=500)

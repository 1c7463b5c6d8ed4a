"""One error shape for every failure: `{"error": <stable class>, "message", "field"}`.

Typed `FirepoolError`s map to statuses here, in one table; pydantic's request errors are
reduced to their first problem with the field named the way a caller wrote it (`env.LD_PRELOAD`
for a forbidden variable, `pods` for a bad count); anything unexpected is a 500 whose body
still has the shape, so a program never has to parse an HTML or framework-default page.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from firepool.model import ErrorCode, FirepoolError

log = logging.getLogger(__name__)

STATUS: dict[ErrorCode, int] = {
    ErrorCode.VALIDATION: 422,
    ErrorCode.FORBIDDEN_ENV: 422,
    ErrorCode.BAD_PACKAGE: 422,
    ErrorCode.UNKNOWN_POOL: 422,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.LOST_RACE: 409,
    ErrorCode.INVALID_TRANSITION: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.QUOTA: 429,
    ErrorCode.UNAVAILABLE: 503,
}

_LOCATIONS = {"body", "query", "path", "header", "cookie"}


def error_response(
    code: ErrorCode, message: str, field: str | None = None, *, status: int | None = None
) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if code == ErrorCode.UNAUTHORIZED else None
    return JSONResponse(
        {"error": code.value, "message": message, "field": field},
        status_code=status or STATUS.get(code, 500),
        headers=headers,
    )


def describe_validation(errors: list[Any]) -> tuple[ErrorCode, str, str | None]:
    """The first pydantic error as (class, message, field)."""
    if not errors:
        return ErrorCode.VALIDATION, "invalid request", None
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ())]
    if loc and loc[0] in _LOCATIONS:
        loc = loc[1:]
    field = ".".join(loc) or None
    kind = first.get("type", "")
    if kind == "forbidden_env":
        name = first.get("ctx", {}).get("name")
        return ErrorCode.FORBIDDEN_ENV, first.get("msg", "forbidden variable"), f"env.{name}"
    if kind == "json_invalid":
        return ErrorCode.VALIDATION, "request body is not valid JSON", None
    if kind == "extra_forbidden":
        return ErrorCode.VALIDATION, f"unknown field {field!r}", field
    if kind == "missing" and field is None:
        return ErrorCode.VALIDATION, "request body is required", None
    message = first.get("msg", "invalid value")
    return ErrorCode.VALIDATION, f"{field}: {message}" if field else message, field


def install(app: FastAPI) -> None:
    @app.exception_handler(FirepoolError)
    async def _typed(_request: Request, err: FirepoolError) -> JSONResponse:
        return error_response(err.code, err.message, err.field)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        code, message, field = describe_validation(list(err.errors()))
        return error_response(code, message, field)

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

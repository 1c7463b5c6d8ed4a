"""API error bodies back into the typed exceptions of `firepool.model`.

The server raises a `FirepoolError` subclass, the API turns it into
`{"error": <class>, "message", "field"}`, and this module turns that body back into the same
subclass, so `except NotFoundError` means the same thing on both sides of the wire. The HTTP
status rides along as `err.status` (None when no response arrived), and a rejected request's
every problem as `problems_of(err)` (typed errors too, one per problem).
"""

from __future__ import annotations

from typing import Any

import httpx

from firepool.model import (
    BadPackageError,
    ConfigError,
    ConflictError,
    ErrorCode,
    FirepoolError,
    ForbiddenEnvError,
    ForbiddenError,
    ImageNotAllowedError,
    InvalidTransitionError,
    LostRaceError,
    NotFoundError,
    PayloadTooLargeError,
    QuotaExceededError,
    RequestValidationError,
    StoreUnavailableError,
    UnauthorizedError,
    UnavailableError,
    UnknownPoolError,
)

#: The one table from an API error class to the exception raised for it. Codes without a
#: class of their own (`InternalError`, and any class a newer server invents) raise the base.
ERROR_CLASSES: dict[ErrorCode, type[FirepoolError]] = {
    cls.code: cls
    for cls in (
        RequestValidationError,
        ForbiddenEnvError,
        UnauthorizedError,
        ForbiddenError,
        NotFoundError,
        ConflictError,
        LostRaceError,
        InvalidTransitionError,
        PayloadTooLargeError,
        BadPackageError,
        ConfigError,
        UnknownPoolError,
        ImageNotAllowedError,
        QuotaExceededError,
        UnavailableError,
        StoreUnavailableError,
    )
}

_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})


class WaitTimeoutError(TimeoutError):
    """`wait` gave up before the job finished; the job itself keeps going."""

    def __init__(self, job_id: str, timeout: float, state: str) -> None:
        super().__init__(f"job {job_id} still {state} after {timeout:g} s")
        self.job_id = job_id
        self.timeout = timeout
        self.state = state


def with_status(err: FirepoolError, status: int | None) -> FirepoolError:
    err.status = status  # type: ignore[attr-defined]
    return err


def status_of(err: FirepoolError) -> int | None:
    """The HTTP status an API error came with (typed access to `err.status`)."""
    status: int | None = getattr(err, "status", None)
    return status


def problems_of(err: FirepoolError) -> list[FirepoolError]:
    """Every problem the broker found in a rejected request, each a typed error naming its
    field; `[err]` itself when the response listed none."""
    problems: list[FirepoolError] | None = getattr(err, "problems", None)
    return list(problems) if problems else [err]


def _typed(body: dict[str, Any]) -> FirepoolError:
    name = body["error"]
    message = str(body.get("message") or name)
    field = body.get("field")
    field = field if isinstance(field, str) else None
    try:
        cls = ERROR_CLASSES.get(ErrorCode(name), FirepoolError)
    except ValueError:
        cls, message = FirepoolError, f"{name}: {message}"
    return cls(message, field=field)


def error_from_body(status: int, body: Any) -> FirepoolError:
    """The typed exception for an error response (`body` is its decoded JSON, or anything)."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        err = _typed(body)
        listed = body.get("problems")
        if isinstance(listed, list):
            err.problems = [  # type: ignore[attr-defined]
                with_status(_typed(p), status)
                for p in listed
                if isinstance(p, dict) and isinstance(p.get("error"), str)
            ]
        return with_status(err, status)
    if status in _UNAVAILABLE_STATUSES:
        return with_status(UnavailableError(f"broker unavailable (HTTP {status})"), status)
    return with_status(FirepoolError(f"unexpected HTTP {status} from the broker"), status)


def error_from_response(response: httpx.Response) -> FirepoolError:
    try:
        body = response.json()
    except ValueError:
        body = None
    return error_from_body(response.status_code, body)


def unreachable(url: str, err: httpx.TransportError) -> FirepoolError:
    """A transport failure (refused, reset, timed out) as an `UnavailableError`."""
    detail = str(err) or type(err).__name__
    return with_status(UnavailableError(f"cannot reach the broker at {url}: {detail}"), None)

"""Request error codes and the typed errors that carry them.

A job's end class is `firepool.model.job_errors.JobErrorClass`, not one of these: a refusal
says what was wrong with a call, an end class what happened to an accepted job."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class ErrorCode(StrEnum):
    """Stable error classes: every error a caller can see carries one of these.

    Each describes a rejected request or a refused operation, on the API or between the broker
    and an agent or a backend. The strings are a public contract: never rename one.
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
    # an agent's refusal of a launch, and a backend's of a pod: the job those refusals end
    # carries the same string as its `JobErrorClass`
    LAUNCH_FAILED = "LaunchFailed"
    DEPENDENCY_INSTALL_FAILED = "DependencyInstallFailed"
    UNSCHEDULABLE = "Unschedulable"


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

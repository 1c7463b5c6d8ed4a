"""Typed errors of the Kubernetes backend, and the one place API failures are mapped to them.

The broker branches on error *types* (a pod that can never be scheduled is not retried like a
flaky API call), so every failure the API server or the client library can produce is turned
into a `BackendError` subclass here, with the offending field named where the server says which
one. Nothing from `kubernetes.client` or urllib3 escapes the backend: the broker never crashes
on an exception type it does not know.
"""

from __future__ import annotations

import json
from typing import Any

from firepool.model import ErrorCode, FirepoolError


class BackendError(FirepoolError):
    """An API call failed or a pod cannot become ready. `status` is the HTTP status if any."""

    code = ErrorCode.UNAVAILABLE

    def __init__(
        self, message: str, *, field: str | None = None, status: int | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.status = status
        #: The server's Retry-After (seconds) on a 429 or 503, if it sent one.
        self.retry_after_s: float | None = None

    @property
    def retryable(self) -> bool:
        """Worth retrying the same call: throttled, server-side or transport failure."""
        return self.status is None or self.status == 429 or self.status >= 500


class ApiRejectedError(BackendError):
    """The API server refused the object (400/422): a template or catalog mistake."""

    code = ErrorCode.CONFIG

    @property
    def retryable(self) -> bool:
        return False


class ForbiddenError(BackendError):
    """401/403 from authentication or RBAC: the broker's service account lacks a verb (see
    deploy/base/role.yaml)."""

    code = ErrorCode.CONFIG

    @property
    def retryable(self) -> bool:
        return False


class ResourceQuotaError(BackendError):
    """403 from the ResourceQuota admission plugin: the namespace's quota has no room for the
    pod. Not a mistake in the broker's rights, and not worth an immediate retry either: the
    room comes back only when something else in the namespace lets go."""

    code = ErrorCode.QUOTA

    @property
    def retryable(self) -> bool:
        return False


class PodSecurityError(BackendError):
    """403 from Pod Security admission: the pod template breaks the namespace's enforced
    level (its `pod-security.kubernetes.io/enforce` label)."""

    code = ErrorCode.CONFIG

    @property
    def retryable(self) -> bool:
        return False


class PodNotFoundError(BackendError):
    code = ErrorCode.NOT_FOUND

    @property
    def retryable(self) -> bool:
        return False


class PodConflictError(BackendError):
    """409: a pod of that name exists already."""

    code = ErrorCode.CONFLICT

    @property
    def retryable(self) -> bool:
        return False


class PodUnschedulableError(BackendError):
    """The scheduler found no node for the pod (resources, selectors, taints)."""

    code = ErrorCode.UNSCHEDULABLE

    @property
    def retryable(self) -> bool:
        return False


class ImagePullError(BackendError):
    """The pool's image cannot be pulled (ErrImagePull, ImagePullBackOff, InvalidImageName)."""

    code = ErrorCode.CONFIG

    @property
    def retryable(self) -> bool:
        return False


class ContainerConfigError(BackendError):
    """The kubelet could not create the container for longer than the grace period
    (CreateContainerConfigError, CreateContainerError): a template names a Secret, ConfigMap or
    setting the node cannot satisfy."""

    code = ErrorCode.CONFIG

    @property
    def retryable(self) -> bool:
        return False


class PodFailedError(BackendError):
    """The pod ended (OOMKilled, evicted, node lost, deleted) before or while it was ready."""

    @property
    def retryable(self) -> bool:
        return False


def _body(raw: Any) -> dict[str, Any]:
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    if not isinstance(raw, str):
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def from_status(status: int, body: Any, what: str, headers: Any = None) -> BackendError:
    """Map an HTTP status and a `Status` body of the API server to a typed error.

    The field comes from `details.causes[0].field` (e.g. `spec.containers[0].image`), which
    the server sets on validation errors; it is None otherwise.
    """
    parsed = _body(body)
    message = str(parsed.get("message") or parsed.get("reason") or f"HTTP {status}")
    causes = (parsed.get("details") or {}).get("causes") or []
    field = None
    if causes and isinstance(causes[0], dict):
        field = causes[0].get("field") or None
    text = f"{what}: {message}"
    error = _classify(status, text, field)
    error.retry_after_s = _seconds(headers)
    return error


def _classify(status: int, text: str, field: str | None) -> BackendError:
    if status in (400, 422):
        return ApiRejectedError(text, field=field, status=status)
    if status == 403 and "exceeded quota" in text:
        return ResourceQuotaError(text, field="pool", status=status)
    if status == 403 and "violates PodSecurity" in text:
        return PodSecurityError(text, field="securityContext", status=status)
    if status in (401, 403):
        return ForbiddenError(text, field=field, status=status)
    if status == 404:
        return PodNotFoundError(text, status=status)
    if status == 409:
        return PodConflictError(text, field="name", status=status)
    return BackendError(text, field=field, status=status)


def map_exception(exc: BaseException, what: str) -> BackendError:
    """Any exception raised by an API call, as a typed error (already-typed ones pass)."""
    if isinstance(exc, BackendError):
        return exc
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        return from_status(status, getattr(exc, "body", None), what, getattr(exc, "headers", None))
    return BackendError(f"{what}: {type(exc).__name__}: {exc}", status=None)


def _seconds(headers: Any) -> float | None:
    if headers is None or not hasattr(headers, "get"):
        return None
    value = headers.get("Retry-After")
    try:
        return None if value is None else max(0.0, float(value))
    except (TypeError, ValueError):
        return None


def retry_after(exc: BaseException) -> float | None:
    """The server's Retry-After in seconds, if the failure carried one."""
    if isinstance(exc, BackendError):
        return exc.retry_after_s
    return _seconds(getattr(exc, "headers", None))

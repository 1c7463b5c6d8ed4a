"""Typed errors of the round policies.

A round policy is fed by drivers (service, simulator) and by measurements, so bad numbers are
expected sooner or later. They are refused with a typed error naming the offending field rather
than turning into a silently wrong allocation.
"""

from __future__ import annotations

from firepool.model import ErrorCode, FirepoolError


class SchedulingError(FirepoolError):
    """Base of every error raised by `firepool.scheduling`."""

    code = ErrorCode.VALIDATION


class InvalidRoundInputError(SchedulingError):
    """The round input is malformed (duplicate job, negative time, mismatched lengths...)."""


class InvalidGoodputError(InvalidRoundInputError):
    """A goodput estimate is negative, NaN or infinite."""


class UnknownPolicyError(SchedulingError):
    code = ErrorCode.CONFIG


class UnknownApplicationError(SchedulingError):
    code = ErrorCode.NOT_FOUND


class SolverUnavailableError(SchedulingError):
    """The requested solver backend is not installed."""

    code = ErrorCode.UNAVAILABLE


class SolverFailedError(SchedulingError):
    """A backend returned no usable solution (should not happen for a well-formed round)."""

    code = ErrorCode.INTERNAL

"""The injected-failure model shared by every driver: a failure stream fixed by its seed.

The scheduler paper's experiments fail each live attempt with probability lambda per round.
Both the simulator and the service draw from this one stream, keyed by (seed, job, slot), so
every policy meets the same failures and a seed reproduces a run: a failure falls on a slot
boundary (a multiple of `slot_s`) and hits each attempt that is restoring or training then.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from typing import NamedTuple

from firepool.model import RequestValidationError


def fails(seed: int, job: int, slot: int, lam: float) -> bool:
    """Whether `job` fails at the end of `slot`: the same answer for every policy."""
    if lam <= 0.0:
        return False
    x = (seed * 0x9E3779B1 + job * 0x85EBCA77 + slot * 0xC2B2AE3D) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x / 4294967296.0 < lam


def job_key(job_id: str) -> int:
    """A stable integer for a job id (the stream must not depend on string hashing)."""
    return zlib.crc32(job_id.encode())


class Failure(NamedTuple):
    """An injected failure: the driver kills every rank of the attempt at time `at`."""

    job_id: str
    attempt: int
    at: float


def failures_between(
    live: Iterable[tuple[str, int]],
    start: float,
    end: float,
    *,
    seed: int,
    rate: float,
    slot_s: float,
) -> list[Failure]:
    """The first failure of each live (job, attempt) on a slot boundary in (start, end]."""
    if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
        raise RequestValidationError(
            "failure rate must be a probability per slot in [0, 1]", field="failure_rate"
        )
    if not (math.isfinite(slot_s) and slot_s > 0):
        raise RequestValidationError("failure slot must be > 0 s", field="slot_s")
    if rate == 0.0 or end <= start:
        return []
    first = math.floor(start / slot_s) + 1
    last = math.floor(end / slot_s)
    out: list[Failure] = []
    for job_id, attempt in live:
        key = job_key(job_id)
        for slot in range(first, last + 1):
            if fails(seed, key, slot, rate):
                out.append(Failure(job_id, attempt, slot * slot_s))
                break
    return out

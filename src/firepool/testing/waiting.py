"""Polling for a condition with a generous deadline (the test machine is shared and slow)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)

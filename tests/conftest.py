"""Suite-wide hygiene: a test running `firepool serve` in-process leaves no logging behind.

`firepool serve` points the root logger at the stderr it was started with. Under `CliRunner`
that stream is closed once the invocation returns, so without this every later log record
would fail to write and spill a "Logging error" traceback into whatever output the next test reads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)

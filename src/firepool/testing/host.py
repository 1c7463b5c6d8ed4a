"""What a test needs from the host it runs on, asked one way everywhere."""

from __future__ import annotations

import os

import pytest


def needs(what: str) -> None:
    """A host this test cannot run on: a skip on a developer's machine, a failure under
    CI=true (the CI machines provide it, so its absence there is a broken set-up, not a reason
    to pass)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and this host lacks {what}")
    pytest.skip(f"needs {what}")

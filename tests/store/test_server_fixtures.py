"""The database fixtures themselves: CI must not pass by silently skipping a server."""

from __future__ import annotations

import pytest

from firepool.testing.databases import require_server as require

DOWN = {"postgresql": "postgresql+psycopg://nobody@127.0.0.1:9/none", "mysql": "unused"}


def test_unreachable_server_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require("postgresql", DOWN)


def test_unreachable_server_skips_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require("postgresql", DOWN)

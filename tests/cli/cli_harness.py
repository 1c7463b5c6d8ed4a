"""Run `firepool ...` in-process against a given broker, as one caller."""

from __future__ import annotations

from collections.abc import Callable

from typer.testing import CliRunner, Result

from firepool.cli.main import app

Invoke = Callable[..., Result]


def invoker(url: str, token: str) -> Invoke:
    runner = CliRunner()
    env = {"FIREPOOL_URL": url, "FIREPOOL_TOKEN": token, "COLUMNS": "200", "NO_COLOR": "1"}

    def invoke(*args: str) -> Result:
        return runner.invoke(app, list(args), env=env, catch_exceptions=False)

    return invoke

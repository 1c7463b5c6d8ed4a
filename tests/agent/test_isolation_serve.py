"""`firepool serve` on a host that can give pods only weak isolation.

Lives with the agent tests because it is about what pods can share. The weak-only host is real:
`serve` is run with a PATH that holds no `unshare`, which is what such a host looks like to it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pod_helpers import new_root
from typer.testing import CliRunner

from firepool.cli.main import app
from firepool.cli.serve import isolation_refusal


def test_refusal_rules() -> None:
    assert isolation_refusal("auto", True, ["a", "b"]) is None  # private pods: any callers
    assert isolation_refusal("auto", False, ["local"]) is None  # weak, one caller: fine
    assert isolation_refusal("weak", False, ["a", "b"]) is None  # asked for by name
    many = isolation_refusal("auto", False, ["alice", "bob"])
    assert many is not None and "--isolation weak" in many and "alice" in many
    assert "needs root" in (isolation_refusal("private", False, []) or "")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = new_root("serve")
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_serve_refuses_two_callers_on_a_weak_only_host(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    for caller in ("alice", "bob"):
        made = runner.invoke(app, ["token", "create", caller, "--data-dir", str(data_dir)])
        assert made.exit_code == 0, made.output
    monkeypatch.setenv("PATH", str(data_dir))  # no unshare on this "host"
    result = runner.invoke(app, ["serve", "--data-dir", str(data_dir), "--port", "0"])
    assert result.exit_code == 2
    assert "only weak isolation" in result.output and "--isolation weak" in result.output
    result = runner.invoke(
        app, ["serve", "--data-dir", str(data_dir), "--isolation", "private", "--port", "0"]
    )
    assert result.exit_code == 2 and "needs root" in result.output


def test_serve_names_the_flag_on_a_bad_isolation_value(data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "--data-dir", str(data_dir), "--isolation", "x"])
    assert result.exit_code == 2 and "--isolation" in result.output

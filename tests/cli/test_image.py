"""`firepool image build`: the archive where --output says, one line naming it, and a typed
error (exit 1, no traceback) for a definition that is not there."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from firepool.cli.main import app


def test_image_build_writes_the_archive_and_names_it(tmp_path: Path) -> None:
    out = tmp_path / "build" / "pool-base.oci.tar"
    result = CliRunner().invoke(
        app, ["image", "build", "--output", str(out), "--name", "firepool/base:test"],
        env={"COLUMNS": "200", "NO_COLOR": "1"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert out.is_file()
    line = result.output.strip()
    assert line.startswith(f"{out}: docker.io/firepool/base:test sha256:")


def test_image_build_without_its_definition_is_a_typed_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["image", "build", "--output", str(tmp_path / "x.tar"),
              "--dockerfile", str(tmp_path / "none.Dockerfile")],
        env={"COLUMNS": "200", "NO_COLOR": "1"},
    )  # fmt: skip
    assert result.exit_code == 1
    assert "ConfigError" in result.output and "none.Dockerfile" in result.output
    assert not (tmp_path / "x.tar").exists()

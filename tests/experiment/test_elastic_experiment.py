"""`firepool experiment elastic`, smoke-sized: real broker, real PyTorch ranks, real SIGTERM
resizes and SIGKILL failures; the table and its files come out, every job finishes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from firepool.cli.main import app

# One job keeps the smoke run short (two jobs on two slots let OAK and Sia trade the slots,
# which the service tests cover); the failures at lambda 0.2 per 1 s round are real kills.
SMALL = [
    "--jobs", "1", "--slots", "2", "--round-s", "1", "--steps", "30", "--seeds", "0",
    "--train-args", "--global-batch 8 --micro-batch 4 --checkpoint-every 5 --report-every-s 0.3",
]


def test_a_small_real_run_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["experiment", "elastic", "--out", str(out), "--policies", "oak,sia",
         "--lambdas", "0.2", *SMALL],
    )
    assert result.exit_code == 0, result.output
    assert "| oak | 0.20 |" in result.output and "| sia | 0.20 |" in result.output
    rows = json.loads((out / "elastic.json").read_text())
    assert {r["policy"] for r in rows} == {"oak", "sia"}
    assert all(r["unfinished"] == 0 and r["mean_jct"] > 0 for r in rows)
    runs = json.loads((out / "runs.json").read_text())
    assert len(runs) == 2 and all(len(r["jobs"]) == 1 for r in runs)
    assert all(r["decide_ms"] for r in runs)
    assert (out / "elastic.md").read_text().startswith("Real run: 1 elastic-cifar jobs")


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    runner = CliRunner()
    unknown = runner.invoke(app, ["experiment", "elastic", "--policies", "oak,fifo"])
    assert unknown.exit_code == 2 and "--policies" in unknown.output
    missing = runner.invoke(
        app, ["experiment", "elastic", "--example", str(tmp_path), "--out", str(tmp_path / "o")]
    )
    assert missing.exit_code == 2 and "train.py" in missing.output

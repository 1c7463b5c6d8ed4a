"""Smoke runs of `firepool.bench reset` and `firepool.bench agent`: tiny, but the real thing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firepool.bench import agent, reset

pytestmark = pytest.mark.timeout(180)


def test_reset_benchmark_writes_the_flat_result(tmp_path: Path) -> None:
    out = tmp_path / "reset.json"
    assert reset.main(["--trials", "3", "--shm-mib", "8", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for key in ("clean_reset_ms_p50", "files10k_reset_ms_p50", "shm_reset_ms_p50"):
        assert result[key] > 0


def test_agent_benchmark_writes_the_flat_result(tmp_path: Path) -> None:
    out = tmp_path / "agent.json"
    argv = ["--trials", "3", "--pods", "1", "--no-torch", "--package-mb", "1", "--json", str(out)]
    assert agent.main(argv) == 0
    result = json.loads(out.read_text())
    for key in (
        "first_instruction_ms_p50_warm",
        "first_instruction_ms_p50_exec",
        "create_to_ready_ms_p50",
    ):
        assert result[key] > 0

"""Runs repeat for a seed across processes (string hashing differs per process), and the
broker's skipped scaler passes and claims are the ones that would have changed nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from firepool.sim import broker as broker_module
from firepool.sim.experiments import runs

SCRIPT = """
import json
from firepool.scheduling import make_policy
from firepool.sim.experiments.runs import standby_cell
from firepool.sim.trainloads import paper_workload
from firepool.sim.training import simulate
train = simulate(make_policy("oak"), paper_workload("small", 5), lam=0.1, seed=5)
cell = standby_cell("production-h200", True, seed=1, jobs=12)
print(json.dumps({"jct": train.jct, "restarts": train.restarts, "cell": cell}, sort_keys=True))
"""


def _run(hash_seed: str) -> Any:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)


def test_same_seed_same_result_in_every_process() -> None:
    assert _run("1") == _run("2")


def test_skipped_passes_and_claims_would_have_changed_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[broker_module.SimBroker] = []

    class Checked(broker_module.SimBroker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, check_skips=True, **kwargs)
            made.append(self)

    monkeypatch.setattr(runs, "SimBroker", Checked)
    runs.standby_cell("production-h200", True, seed=0, jobs=12)
    runs.loop_cell("production-h200", "agent2", "off", seed=0)
    runs.sessions_cell("production-cpu", "bursty", "on", 0, 1800.0, 60.0, idle_timeout=60.0,
                       min_count=0, max_idle_count=16)
    assert len(made) == 3 and all(b.passes_skipped > 0 for b in made)

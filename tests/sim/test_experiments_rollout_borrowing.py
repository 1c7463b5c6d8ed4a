"""`firepool sim rollout` and `firepool sim borrowing`, smoke-sized: the paper's figures sit
next to ours, and what the rules bound holds in every run."""

from __future__ import annotations

from pathlib import Path

from firepool.sim.experiments.borrowing import OWNER, run_borrowing
from firepool.sim.experiments.rollout import run_rollout


def test_rollout_experiment_converges_within_its_bounds(tmp_path: Path) -> None:
    data = run_rollout(tmp_path, seeds=1, workers=1, progress=False)
    assert "| converged after the edit (s) | 324 [286, 359] |" in data["markdown"]
    (rolled,) = [r for r in data["runs"] if r["arm"] == "rollout"]
    assert rolled["converged_s"] is not None and rolled["converged_s"] > 0
    assert rolled["max_retiring"] == 1 and rolled["max_pods"] <= 8
    assert all(r["failed_jobs"] == 0 for r in data["runs"])
    assert (tmp_path / "rollout.md").read_text() == data["markdown"]


def test_borrowing_experiment_gives_back_one_card_per_card(tmp_path: Path) -> None:
    data = run_borrowing(tmp_path, seeds=1, workers=1, progress=False)
    assert "| time to borrow" in data["markdown"] and "11.8 [10.5, 13.2]" in data["markdown"]
    (run,) = data["runs"]
    assert run["per_gpu"] and all(x == 1.0 for x in run["per_gpu"])
    assert run["owner_placed"] == [OWNER] * len(run["owner_placed"])
    assert run["over_placement"] == 0 and run["failed_jobs"] == 0
    assert run["preempted"] > 0  # reclaims met busy pods, and none failed a job

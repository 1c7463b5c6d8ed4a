"""The training simulator drives the shared elastic lifecycle: its restarts, T_ckpt and rounds
are the lifecycle's, failures come from the shared stream and trigger rounds, runs repeat for a
seed, and the Sia memo changes nothing but the number of solver calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.control import elastic
from firepool.scheduling import (
    Configuration,
    RoundInput,
    RoundPolicy,
    RoundResult,
    SiaParams,
    SiaPolicy,
    make_policy,
)
from firepool.sim import training
from firepool.sim.training import TrainSpec, simulate
from firepool.sim.trainloads import paper_workload
from firepool.sim.trainmodel import BUCKETS as TENTHS
from firepool.sim.trainmodel import SLOT_S, RestartCost, configs, rate


class Alternate:
    """Sizes every job 2 then 4 GPUs in turn, each round (a resize per round), or always 2."""

    name = "alternate"

    def __init__(self, resize: bool = True) -> None:
        self.rounds = 0
        self.resize = resize

    def decide(self, round_input: RoundInput) -> RoundResult:
        self.rounds += 1
        n = 4 if self.resize and self.rounds % 2 == 0 else 2
        out: dict[str, Configuration | None] = {}
        for j in round_input.jobs:
            out[j.job_id] = next(c for c in j.configurations if c.replicas == n)
        return RoundResult(self.name, out)


class Calls:
    """Records what the simulator asks of the real `ElasticLifecycle`.

    The spy is a subclass installed where the simulator builds its lifecycle, not a patch of
    the class: a broker another test left serving (a session fixture) runs its own rounds on
    a wall-clock timer in a background thread, and those must not count here."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.exits: list[tuple[str, str, float]] = []
        self.rounds: list[tuple[float, str]] = []
        self.fractions: dict[str, list[float]] = {}
        self.submitted: list[str] = []
        calls = self

        class Spied(elastic.ElasticLifecycle):
            def submit(self, spec: elastic.ElasticJobSpec, now: float) -> None:
                calls.submitted.append(spec.job_id)
                super().submit(spec, now)

            def attempt_exited(self, job_id: str, attempt: int, now: float,
                               outcome: elastic.ExitOutcome) -> list[elastic.Decision]:
                calls.exits.append((job_id, outcome, now))
                return super().attempt_exited(job_id, attempt, now, outcome)

            def progress(self, job_id: str, attempt: int, now: float,
                         samples_per_s: float | None = None,
                         fraction: float | None = None) -> bool:
                assert fraction is not None
                calls.fractions.setdefault(job_id, []).append(fraction)
                return super().progress(job_id, attempt, now, samples_per_s, fraction)

            def run_round(self, now: float, policy: RoundPolicy) -> elastic.RoundOutcome:
                out = super().run_round(now, policy)
                calls.rounds.append((now, out.trigger))
                return out

        monkeypatch.setattr(training, "ElasticLifecycle", Spied)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    yield Calls(monkeypatch)


def one_job(work_s: float = 600.0) -> list[TrainSpec]:
    """A cifar10 job of `work_s` seconds on two GPUs at the start of training."""
    two = next(c for c in configs("cifar10", 12) if c.replicas == 2)
    return [TrainSpec("cifar10-0", "cifar10", 0.0, work_s * rate("cifar10", two, 0))]


def test_jobs_go_through_the_lifecycle(calls: Calls) -> None:
    jobs = paper_workload("small", 2)
    res = simulate(make_policy("oak"), jobs, lam=0.1, seed=2)
    assert res.unfinished == 0 and len(res.jct) == len(jobs)
    assert calls.submitted == [str(i) for i in range(len(jobs))]
    completed = [j for j, outcome, _ in calls.exits if outcome == "completed"]
    assert sorted(completed) == sorted(calls.submitted)
    assert res.restarts == sum(1 for _, o, _ in calls.exits if o != "completed")
    for fractions in calls.fractions.values():  # the prior follows progress, tenth by tenth
        assert fractions == sorted(fractions) and fractions[-1] == (TENTHS - 1) / TENTHS
    assert res.rounds == len(calls.rounds)


def test_restarts_and_t_ckpt_come_from_the_lifecycle(calls: Calls) -> None:
    res = simulate(Alternate(), one_job(600.0))
    resizes = sum(1 for _, o, _ in calls.exits if o == "checkpointed")
    assert resizes >= 5 and res.restarts == resizes
    # Checkpoints save in no time; every restart restores for cifar10's whole 50 s penalty.
    assert res.t_ckpt == pytest.approx(50.0 * resizes)
    split = simulate(Alternate(), one_job(600.0), cost=RestartCost(save_share=0.4))
    assert split.t_ckpt == pytest.approx(50.0 * split.restarts)  # 20 s save + 30 s restore


def test_a_failure_ends_the_attempt_and_runs_a_round_at_once(calls: Calls) -> None:
    res = simulate(Alternate(resize=False), one_job(1800.0), lam=0.3, seed=4)
    failures = [t for _, o, t in calls.exits if o == "failed"]
    assert failures and res.unfinished == 0
    # The shared stream for (seed 4, job 0, lambda 0.3) fires at slots 8, 11, 12, 18, 21, ...
    # (a known answer, pinned): the job fails at each of them while it runs, and nowhere else.
    assert failures == [k * 60.0 for k in (8, 11, 12, 18, 21)] and SLOT_S == 60.0
    failure_rounds = [t for t, trigger in calls.rounds if trigger == "failure"]
    assert failure_rounds == failures


def test_same_seed_same_run() -> None:
    jobs = paper_workload("small", 3)
    a = simulate(make_policy("oak"), jobs, lam=0.1, seed=3)
    b = simulate(make_policy("oak"), jobs, lam=0.1, seed=3)
    assert (a.jct, a.restarts, a.rounds, a.t_ckpt, a.t_queue) == (
        b.jct, b.restarts, b.rounds, b.t_ckpt, b.t_queue)
    c = simulate(make_policy("oak"), jobs, lam=0.1, seed=4)  # the failure stream moves
    assert (c.jct, c.restarts) != (a.jct, a.restarts)


def test_sia_memo_only_saves_solver_calls() -> None:
    # Only a goodput-only Sia (no restart factor, no pinning) may be memoised.
    sia = SiaPolicy(SiaParams(restart_factor=False, pin_restoring=False))
    assert not SiaPolicy().goodput_only

    class Opaque:  # the same policy, hidden from the memo
        name = "sia"

        def decide(self, round_input: RoundInput) -> RoundResult:
            return sia.decide(round_input)

    jobs = paper_workload("medium", 1)
    memo = simulate(sia, jobs, lam=0.1, seed=1)
    plain = simulate(Opaque(), jobs, lam=0.1, seed=1)
    assert (memo.jct, memo.restarts, memo.rounds) == (plain.jct, plain.restarts, plain.rounds)
    assert memo.decisions < memo.rounds // 2 and plain.decisions == plain.rounds


def test_ablation_mask_hides_progress_only() -> None:
    seen: list[float] = []
    oak = make_policy("oak")

    class Spy:
        name = "oak"

        def decide(self, round_input: RoundInput) -> RoundResult:
            seen.extend(j.t_progress for j in round_input.jobs)
            return oak.decide(round_input)

    res = simulate(Spy(), paper_workload("small", 0), mask_restart=True)
    assert res.unfinished == 0 and seen and all(t == 0.0 for t in seen)


def test_jobs_left_idle_are_censored_at_the_horizon() -> None:
    class Never:
        name = "never"

        def decide(self, round_input: RoundInput) -> RoundResult:
            return RoundResult(self.name, {j.job_id: None for j in round_input.jobs})

    jobs = paper_workload("small", 0)
    res = simulate(Never(), jobs, horizon_s=7200.0)
    assert res.unfinished == len(jobs) and not res.jct
    assert res.censored == {j.name: 7200.0 - j.arrival for j in jobs}
    assert res.max_jct == 7200.0 - jobs[0].arrival


def test_oak_table_command_flags_json_cells_and_the_orderings(tmp_path: Path) -> None:
    """`sim oak-table` with its flags, at small scale: the JSON names our policy and holds one
    cell per (workload, lambda, policy) with the paired gains against the faithful Sia, and
    the orderings that must hold at any scale do: failures cost every policy time, OAK and
    Lookahead are at parity with Sia without failures (the paper's parity: within 10%)."""
    from typer.testing import CliRunner

    from firepool.cli.sim import sim_app

    args = ["oak-table", "--out", str(tmp_path), "--workers", "1", "--seeds", "2",
            "--workloads", "small", "--lambdas", "0,0.1",
            "--policies", "oak,sia,sia-reference,lookahead"]
    result = CliRunner().invoke(sim_app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "oak-table.json").read_text())
    assert data["ours"] == "lookahead" and data["baseline"] == "sia"
    cells = {(c["workload"], c["lambda"], c["policy"]): c for c in data["cells"]}
    assert set(cells) == {("small", lam, p) for lam in (0.0, 0.1)
                          for p in ("oak", "sia", "sia-reference", "lookahead")}
    for c in cells.values():
        assert {"mean_jct_s", "max_jct_s", "unfinished"} <= set(c)
        assert c["unfinished"] == 0 and 0 < c["mean_jct_s"] <= c["max_jct_s"]
        assert c["mean_jct_s"] == pytest.approx(sum(c["seed_means"]) / 2)
        if c["policy"] != "sia":
            low, high = c["paired_mean_gain"][1:]
            assert low <= c["paired_mean_gain"][0] <= high
    for p in ("oak", "sia", "sia-reference", "lookahead"):
        assert cells[("small", 0.1, p)]["mean_jct_s"] > cells[("small", 0.0, p)]["mean_jct_s"]
    for p in ("oak", "lookahead"):
        assert abs(cells[("small", 0.0, p)]["delta_mean"]) < 0.10
    assert (tmp_path / "oak-table.md").read_text().startswith("|")

"""`firepool experiment ...`: experiments on the real broker, with real processes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

experiment_app = typer.Typer(no_args_is_help=True, help="Experiments on the real broker.")


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(",") if part.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


@experiment_app.command("elastic")
def elastic(
    out: Path = typer.Option(Path("results/elastic"), help="Directory for JSON and markdown."),
    policies: str | None = typer.Option(None, help="Round policies, comma separated [oak,sia]."),
    lambdas: str | None = typer.Option(
        None, help="Failure rates per round per running job [0,0.05,0.10]."
    ),
    seeds: str | None = typer.Option(None, help="Seeds; each fixes jobs and arrivals [0,1,2]."),
    jobs: int | None = typer.Option(None, min=1, help="Elastic jobs per run [4]."),
    slots: int | None = typer.Option(None, min=1, help="Pod slots, one rank each [4]."),
    round_s: float | None = typer.Option(None, min=0.5, help="Round length in seconds [10]."),
    steps: str | None = typer.Option(None, help="Job lengths in steps, drawn per job."),
    p_restart_s: float | None = typer.Option(None, min=0.0, help="Restart penalty for OAK."),
    example: Path | None = typer.Option(None, help="The elastic-cifar example directory."),
    train_args: str | None = typer.Option(None, help="Arguments for train.py, space separated."),
) -> None:
    """The scheduler paper's failure experiment, scaled to this machine: OAK vs Sia."""
    from firepool.experiment.elastic import ElasticExperiment, main
    from firepool.scheduling import POLICY_NAMES

    changes: dict[str, Any] = {}
    if policies is not None:
        names = tuple(p.strip() for p in policies.split(",") if p.strip())
        for name in names:
            if name not in POLICY_NAMES:
                raise typer.BadParameter(
                    f"unknown policy {name!r}; choose from {POLICY_NAMES}", param_hint="--policies"
                )
        changes["policies"] = names
    if lambdas is not None:
        changes["lambdas"] = _floats(lambdas)
    if seeds is not None:
        changes["seeds"] = _ints(seeds)
    if steps is not None:
        changes["steps"] = _ints(steps)
    if train_args is not None:
        changes["extra_args"] = tuple(train_args.split())
    for name, value in (("jobs", jobs), ("slots", slots), ("round_s", round_s),
                        ("p_restart_s", p_restart_s), ("example", example)):
        if value is not None:
            changes[name] = value
    exp = dataclasses.replace(ElasticExperiment(), **changes)
    try:
        main(exp, out)
    except FileNotFoundError as err:
        raise typer.BadParameter(str(err), param_hint="--example") from None


@experiment_app.command("rollout")
def rollout(
    out: Path = typer.Option(Path("results/rollout"), help="Directory for JSON and markdown."),
    callers: int = typer.Option(12, min=1, help="Callers with no think time [12]."),
    load_s: float = typer.Option(30.0, min=0.0, help="Seconds of load before the edit."),
    window_s: float = typer.Option(120.0, min=1.0, help="Seconds measured after the edit."),
) -> None:
    """The broker paper's template rollout under saturated load (C.3), on local pods."""
    from firepool.experiment.rollout import RolloutRun, main

    main(RolloutRun(callers=callers, load_s=load_s, window_s=window_s), out)


@experiment_app.command("faults")
def faults(
    out: Path = typer.Option(Path("results/faults"), help="Directory for JSON and markdown."),
    json_path: Path | None = typer.Option(None, "--json", help="Also write the totals here."),
    kills: int | None = typer.Option(None, min=0, help="SIGKILLs of the broker [30]."),
    jobs: int | None = typer.Option(None, min=0, help="Short jobs in the stream [400]."),
    store_restarts: int | None = typer.Option(None, min=0, help="Store outages [3]."),
    partitions: int | None = typer.Option(None, min=0, help="Agent partitions [5]."),
    agent_kills: int | None = typer.Option(None, min=0, help="Agent SIGKILLs [5]."),
    store: str = typer.Option("sqlite", help="sqlite, or postgresql (a private server)."),
    seed: int = typer.Option(0, help="Fixes the gaps between faults and the jobs."),
) -> None:
    """A bounded fault campaign under load: nothing lost, nothing run twice."""
    from firepool.experiment.faults import FaultCampaign, main

    if store not in ("sqlite", "postgresql"):
        raise typer.BadParameter("choose sqlite or postgresql", param_hint="--store")
    changes: dict[str, Any] = {"store": store, "seed": seed}
    for name, value in (("kills", kills), ("jobs", jobs), ("store_restarts", store_restarts),
                        ("partitions", partitions), ("agent_kills", agent_kills)):
        if value is not None:
            changes[name] = value
    main(dataclasses.replace(FaultCampaign(), **changes), out, json_path)

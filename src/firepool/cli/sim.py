"""`firepool sim ...`: the simulator's experiments as commands (JSON + markdown + PNG each)."""

from __future__ import annotations

import typer

sim_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Simulate the control plane in virtual time and reproduce the papers.",
)

_OUT = typer.Option("sim-results", "--out", help="Folder for JSON, markdown and PNG.")
_WORKERS = typer.Option(None, "--workers", help="Processes (default: all cores).")


def _done(data: dict[str, object]) -> None:
    typer.echo(str(data.get("markdown", "")))


@sim_app.command()
def loops(
    out: str = _OUT, repeats: int = typer.Option(10, "--repeats"), workers: int | None = _WORKERS
) -> None:
    """Reuse On vs Reuse Off / fresh pod per job (broker paper Table 5)."""
    from firepool.sim.experiments.loops import run_loops

    _done(run_loops(out, repeats, workers))


@sim_app.command()
def standby(
    out: str = _OUT, repeats: int = typer.Option(10, "--repeats"), workers: int | None = _WORKERS
) -> None:
    """Standby on vs off, 30 sequential jobs with fresh tags (Table 6)."""
    from firepool.sim.experiments.loops import run_standby

    _done(run_standby(out, repeats, workers))


@sim_app.command("shared-pool")
def shared_pool(
    out: str = _OUT, seeds: int = typer.Option(5, "--seeds"), workers: int | None = _WORKERS
) -> None:
    """Elastic training and agent loops on one CPU pool, through the one broker core."""
    from firepool.sim.experiments.shared_pool import run_shared_pool

    _done(run_shared_pool(out, seeds, workers))


@sim_app.command("gang-starvation")
def gang_starvation(
    out: str = _OUT,
    seeds: int = typer.Option(20, "--seeds"),
    hold: float = typer.Option(600.0, "--hold", help="A reservation's bound (s)."),
    workers: int | None = _WORKERS,
) -> None:
    """A gang under a stream of one-pod jobs, with and without age-keyed reservations
    (an extension beyond the papers)."""
    from firepool.sim.experiments.gang_starvation import run_gang_starvation

    _done(run_gang_starvation(out, seeds, workers, hold_s=hold))


@sim_app.command()
def rollout(
    out: str = _OUT, seeds: int = typer.Option(10, "--seeds"), workers: int | None = _WORKERS
) -> None:
    """A template rollout under saturated load, paper vs ours (broker paper C.3)."""
    from firepool.sim.experiments.rollout import run_rollout

    _done(run_rollout(out, seeds, workers))


@sim_app.command()
def borrowing(
    out: str = _OUT, seeds: int = typer.Option(3, "--seeds"), workers: int | None = _WORKERS
) -> None:
    """Borrow and give back an owner's cards, paper vs ours (broker paper A.7, C.3)."""
    from firepool.sim.experiments.borrowing import run_borrowing

    _done(run_borrowing(out, seeds, workers))


@sim_app.command()
def frontier(
    out: str = _OUT,
    seeds: int = typer.Option(3, "--seeds"),
    horizon: float = typer.Option(7200.0, "--horizon"),
    workers: int | None = _WORKERS,
) -> None:
    """Held capacity vs start latency for floor x idle cap x keep-alive (Figure 6b)."""
    from firepool.sim.experiments.frontier import run_frontier

    _done(run_frontier(out, seeds, workers, horizon=horizon))


@sim_app.command()
def fragmentation(
    out: str = _OUT,
    seeds: int = typer.Option(10, "--seeds"),
    horizon: float = typer.Option(3600.0, "--horizon"),
    workers: int | None = _WORKERS,
) -> None:
    """One late-bound pool vs a pool per environment (Figure 5)."""
    from firepool.sim.experiments.fragmentation import run_fragmentation

    _done(run_fragmentation(out, seeds, workers, horizon=horizon))


@sim_app.command()
def lengths(
    out: str = _OUT,
    replicates: int = typer.Option(3, "--replicates"),
    workers: int | None = _WORKERS,
) -> None:
    """Reuse On over Off speedup vs job length and think time (Figure 7)."""
    from firepool.sim.experiments.frontier import run_lengths

    _done(run_lengths(out, replicates, workers))


def _workloads(traces: str | None) -> tuple[str, ...]:
    from pathlib import Path

    from firepool.sim.experiments.oak import WORKLOADS

    if traces is None:
        return WORKLOADS
    return WORKLOADS + tuple(str(p) for p in sorted(Path(traces).glob("workload-*.csv")))


_TRACES = typer.Option(
    None, "--traces", help="A workloads-0.5 folder: add its relative-load workloads."
)


@sim_app.command("oak-table")
def oak_table(
    out: str = _OUT,
    seeds: int = typer.Option(10, "--seeds"),
    traces: str | None = _TRACES,
    workers: int | None = _WORKERS,
    workloads: str | None = typer.Option(
        None, "--workloads", help="Comma-separated; default: the four paper workloads."
    ),
    lambdas: str = typer.Option("0,0.05,0.1", "--lambdas"),
    policies: str = typer.Option("oak,sia,sia-reference,lookahead", "--policies"),
) -> None:
    """OAK, both Sia modes and Lookahead over workloads x lambda (scheduler paper Table II)."""
    from firepool.sim.experiments.oak import run_oak_table

    chosen = _workloads(traces) if workloads is None else tuple(workloads.split(","))
    _done(
        run_oak_table(
            out,
            seeds,
            workers,
            workloads=chosen,
            lams=tuple(float(x) for x in lambdas.split(",")),
            policies=tuple(policies.split(",")),
        )
    )


@sim_app.command("oak-ablation")
def oak_ablation(
    out: str = _OUT, seeds: int = typer.Option(10, "--seeds"), workers: int | None = _WORKERS
) -> None:
    """Sia, +age, +restart, full OAK on medium and congestion (Table III)."""
    from firepool.sim.experiments.oak import run_oak_ablation

    _done(run_oak_ablation(out, seeds, workers))


@sim_app.command("oak-sweep")
def oak_sweep(
    out: str = _OUT,
    seeds: int = typer.Option(5, "--seeds"),
    policies: str = typer.Option("oak,sia,pollux,gavel,drf,oak-nsga2", "--policies"),
    workloads: str = typer.Option("medium,congestion", "--workloads"),
    lambdas: str = typer.Option("0,0.02,0.05,0.1,0.15", "--lambdas"),
    workers: int | None = _WORKERS,
) -> None:
    """Lambda up to 0.15 with Pollux, Gavel, DRF and the NSGA-II hybrid (section V-C, V-E).

    Pollux (NSGA-II 100 x 100) and Gavel take seconds per round and a medium or congestion run
    has thousands of rounds: give them few seeds or the small workload.
    """
    from firepool.sim.experiments.oak import run_oak_sweep

    _done(
        run_oak_sweep(
            out,
            seeds,
            workers,
            policies=tuple(policies.split(",")),
            workloads=tuple(workloads.split(",")),
            lams=tuple(float(x) for x in lambdas.split(",")),
        )
    )


@sim_app.command()
def calibrate(
    out: str = typer.Option("local-venue.json", "--out"), pods: int = typer.Option(4, "--pods")
) -> None:
    """Measure this machine's local backend and write a venue file."""
    from firepool.sim.calibrate import calibrate_local

    venue = calibrate_local(pods)
    venue.save(out)
    typer.echo(f"wrote {out}: create median {venue.create.median:.2f} s")

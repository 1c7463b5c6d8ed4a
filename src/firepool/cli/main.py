"""The `firepool` command line."""

from __future__ import annotations

import typer

from firepool.cli import capacity, image, jobs, run, top
from firepool.cli.experiment import experiment_app
from firepool.cli.serve import serve as serve_command
from firepool.cli.serve import token_app
from firepool.cli.sim import sim_app

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="firepool: warm GPU and CPU capacity broker."
)

app.add_typer(sim_app, name="sim")
app.add_typer(experiment_app, name="experiment")


@app.command()
def demo(
    json_path: str | None = typer.Option(None, "--json", help="Write each arm's figures here."),
    scale: float = typer.Option(0.5, help="Multiply the paper's job bodies and pauses."),
    cap: int = typer.Option(4, help="Pool ceiling (pods) for every arm."),
    seed: int = typer.Option(2027, help="Seed of the workloads (the same jobs in every arm)."),
    workloads: str | None = typer.Option(
        None, "--workloads", help="Comma-separated: agent2, agent4, rl (default: all three)."
    ),
    plot: str = typer.Option(
        "firepool-demo.png", "--plot", help="Write the PNG here ('' for none)."
    ),
    sim_seeds: int = typer.Option(
        5, "--sim-seeds", min=0, help="Seeds of the simulated production-h200 rows (0: none)."
    ),
) -> None:
    """Run the broker paper's agent and RL loops under three arms and print the results,
    beside the same loops on the production-h200 venue in the simulator; write a PNG."""
    from firepool.demo.main import choose, run_demo

    keys = None if workloads is None else [k.strip() for k in workloads.split(",") if k.strip()]
    try:
        choose(keys)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--workloads") from None
    raise typer.Exit(
        run_demo(
            seed=seed,
            scale=scale,
            cap=cap,
            json_path=json_path,
            workloads=keys,
            plot_path=plot or None,
            sim_seeds=sim_seeds,
        )
    )


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(ctx: typer.Context, name: str = typer.Argument(..., help="Benchmark name.")) -> None:
    """Run a benchmark (same as `python -m firepool.bench NAME ...`)."""
    from firepool.bench.__main__ import main

    raise typer.Exit(main([name, *ctx.args]))


app.command()(serve_command)
app.add_typer(token_app, name="token")
for commands in (run, jobs, capacity, top, image):
    commands.register(app)

if __name__ == "__main__":
    app()

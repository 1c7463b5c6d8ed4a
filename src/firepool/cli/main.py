"""The `firepool` command line."""

from __future__ import annotations

import typer

from firepool.cli import capacity, jobs, run, top
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
) -> None:
    """Run the broker paper's agent and RL loops under three arms and print the results."""
    from firepool.demo.main import run_demo

    raise typer.Exit(run_demo(seed=seed, scale=scale, cap=cap, json_path=json_path))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(ctx: typer.Context, name: str = typer.Argument(..., help="Benchmark name.")) -> None:
    """Run a benchmark (same as `python -m firepool.bench NAME ...`)."""
    from firepool.bench.__main__ import main

    raise typer.Exit(main([name, *ctx.args]))


app.command()(serve_command)
app.add_typer(token_app, name="token")
for commands in (run, jobs, capacity, top):
    commands.register(app)

if __name__ == "__main__":
    app()

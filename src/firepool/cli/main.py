"""The `firepool` command line."""

from __future__ import annotations

import typer

from firepool.cli import capacity, jobs, run
from firepool.cli.serve import serve as serve_command
from firepool.cli.serve import token_app
from firepool.cli.sim import sim_app

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="firepool: warm GPU and CPU capacity broker."
)

app.add_typer(sim_app, name="sim")


@app.command()
def demo(
    json_path: str | None = typer.Option(None, "--json", help="Write the results as JSON here."),
) -> None:
    """Run the main demonstration on this machine and print its results.

    Until the end-to-end broker lands this runs the control-plane tracker benchmark.
    """
    from firepool.bench import tracker

    argv = ["--pods", "100000"]
    if json_path:
        argv += ["--json", json_path]
    raise typer.Exit(tracker.main(argv))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(ctx: typer.Context, name: str = typer.Argument(..., help="Benchmark name.")) -> None:
    """Run a benchmark (same as `python -m firepool.bench NAME ...`)."""
    from firepool.bench.__main__ import main

    raise typer.Exit(main([name, *ctx.args]))


app.command()(serve_command)
app.add_typer(token_app, name="token")
for commands in (run, jobs, capacity):
    commands.register(app)

if __name__ == "__main__":
    app()

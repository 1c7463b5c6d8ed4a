"""`firepool jobs`, `firepool cancel`, `firepool logs`: a caller's view of its own jobs."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from firepool.cli.common import (
    JsonFlag,
    Output,
    OutputOption,
    TokenOption,
    UrlOption,
    broker_errors,
    connect,
    emit,
)


def jobs(
    state: Annotated[
        list[str] | None, typer.Option("--state", "-s", help="Only this state (repeatable).")
    ] = None,
    pool: Annotated[str | None, typer.Option("--pool", "-p", help="Only this pool.")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many jobs.")] = 100,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List your jobs, oldest first."""
    from firepool.cli.tables import jobs_table

    states = [s.upper() for s in state or ()]
    with connect(url, token) as client, broker_errors():
        found = client.list(state=states, pool=pool, queue=queue, limit=limit)
    emit(found, output, as_json, lambda wide: jobs_table(found, wide=wide))


def cancel(
    job_ids: Annotated[list[str], typer.Argument(help="Job ids.", metavar="ID...")],
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel jobs: a queued job ends at once, a running one is stopped by the broker."""
    with connect(url, token) as client, broker_errors():
        for job_id in job_ids:
            job = client.cancel(job_id)
            if job.state.terminal:
                typer.echo(f"{job.id}: {job.state.value}")
            else:
                typer.echo(f"{job.id}: cancel requested ({job.state.value})")


def logs(
    job_id: Annotated[str, typer.Argument(help="Job id.", metavar="ID")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep reading until the job ends.")
    ] = False,
    attempt: Annotated[
        int | None, typer.Option("--attempt", help="Only this attempt (0 is the first).")
    ] = None,
    rank: Annotated[
        int, typer.Option("--rank", min=0, help="This rank's output (0 is the first pod's).")
    ] = 0,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Print a job's output (every attempt, in order)."""
    with connect(url, token) as client, broker_errors():
        for chunk in client.logs(job_id, follow=follow, attempt=attempt, rank=rank):
            sys.stdout.write(chunk)
            sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command()(jobs)
    app.command()(cancel)
    app.command()(logs)

"""`firepool run`: submit a job, stream its output, exit with its exit code.

    firepool run --pool cpu --package ./agent -- python main.py --steps 3

The job's output goes to stdout untouched; notes (job id, outcome, acquisition path) go to
stderr. The exit status is the job's own exit code, so `firepool run ... && next` composes
like running the command locally. A job that ended without any process exiting (cancelled,
timed out before launch, pod lost) exits 1 with the broker's reason; a refused submission or
an unreachable broker exits 125 (as `docker run` does), and Ctrl-C cancels the job (130).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from firepool.cli.common import TokenOption, UrlOption, broker_errors, connect, stderr

if TYPE_CHECKING:
    from firepool.api.schemas import JobOut
    from firepool.client import SubmitOptions

BROKER_ERROR = 125
INTERRUPTED = 130


def parse_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"expected K=V, got {pair!r}", param_hint="--env")
        env[name] = value
    return env


def outcome(job: JobOut) -> tuple[int, str | None]:
    """The exit status for a finished job, and the message to show when it failed."""
    from firepool.model import JobState

    code = job.exit_code
    if job.state == JobState.SUCCEEDED:
        return (code or 0), None
    reason = job.error_class.value if job.error_class else job.state.value
    detail = f": {job.message}" if job.message else ""
    if code is not None and code != 0:
        status = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell
        status = status if 0 < status < 256 else 1
        return status, f"job {job.id} {job.state.value} ({reason}, exit code {code}){detail}"
    return 1, f"job {job.id} {job.state.value} without an exit code ({reason}){detail}"


def describe(job: JobOut) -> str:
    """One line: state, exit code, where it ran and how the pod was obtained, run time."""
    pods = ", ".join(f"{p.name} {p.acquisition.value}/{p.reason}" for p in job.pods) or "no pod"
    ran = ""
    if job.timings.started is not None and job.timings.finished is not None:
        ran = f" · ran {job.timings.finished - job.timings.started:.2f}s"
    exit_code = "-" if job.exit_code is None else job.exit_code
    retries = f" · {job.retries} retries" if job.retries else ""
    return f"job {job.id} {job.state.value} · exit {exit_code} · {pods}{ran}{retries}"


def run(
    command: Annotated[
        list[str],
        typer.Argument(help="The command to run in the pod (after --).", metavar="COMMAND"),
    ],
    pool: Annotated[str, typer.Option("--pool", "-p", help="Pool to run on.")],
    package: Annotated[
        str | None,
        typer.Option("--package", help="Code directory or zip (uploaded once), or a digest."),
    ] = None,
    requirements: Annotated[
        Path | None,
        typer.Option(
            "--requirements",
            "-r",
            help="requirements.txt to install on top.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="K=V (repeatable).")] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", help="Lease tag: jobs with one tag reuse pods.")
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Queue name.")] = None,
    pods: Annotated[int | None, typer.Option("--pods", help="Pods for one gang job.")] = None,
    single_use: Annotated[
        bool, typer.Option("--single-use", help="A fresh pod, deleted afterwards.")
    ] = False,
    image: Annotated[
        str | None,
        typer.Option("--image", help="Your own image, from the pool's allowed_images."),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Job time limit in seconds.")
    ] = None,
    max_retries: Annotated[
        int | None, typer.Option("--max-retries", help="Retries after a failure.")
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Print the job id and return.")
    ] = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Run a command on a warm pod: stream its output and exit with its exit code."""
    options: SubmitOptions = {}
    if package is not None:
        options["package"] = package
    if requirements is not None:
        options["requirements"] = requirements
    if env:
        options["env"] = parse_env(env)
    if tag is not None:
        options["lease_tag"] = tag
    if queue is not None:
        options["queue"] = queue
    if pods is not None:
        options["pods"] = pods
    if single_use:
        options["single_use"] = True
    if image is not None:
        options["image"] = image
    if timeout is not None:
        options["timeout_s"] = timeout
    if max_retries is not None:
        options["max_retries"] = max_retries
    notes = stderr()
    with connect(url, token) as client:
        with broker_errors(BROKER_ERROR):
            job = client.submit(pool, command, **options)
        if detach:
            typer.echo(job.id)
            return
        notes.print(f"[dim]job {job.id} submitted to pool {pool}[/]")
        try:
            with broker_errors(BROKER_ERROR):
                for chunk in client.logs(job.id, follow=True):
                    sys.stdout.write(chunk)
                    sys.stdout.flush()
                final = client.wait(job.id)
        except KeyboardInterrupt:
            with broker_errors(BROKER_ERROR):
                client.cancel(job.id)
            notes.print(f"job {job.id} cancelled")
            raise typer.Exit(INTERRUPTED) from None
    status, problem = outcome(final)
    notes.print(f"[dim]{describe(final)}[/]")
    if problem:
        notes.print(f"[red]error:[/] {problem}")
    raise typer.Exit(status)


def register(app: typer.Typer) -> None:
    app.command(context_settings={"allow_interspersed_args": False})(run)

"""What the client-side commands share: the connection options, one way to report a broker
error, and the consoles (tables on stdout, notes and errors on stderr, so `firepool run`'s
stdout carries exactly the job's output).

Everything heavy (the SDK, rich) is imported inside functions: `firepool --help` and shell
completion must not load the HTTP stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from firepool.client import Client

UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="Broker URL (default: $FIREPOOL_URL, else the local server's)."),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token", help="Caller token (default: $FIREPOOL_TOKEN, else the local server's)."
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def stdout() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


@contextmanager
def broker_errors(exit_code: int = 1) -> Iterator[None]:
    """Print a broker error as `error: <class>: <message>` and exit, instead of a traceback."""
    from firepool.model import FirepoolError

    try:
        yield
    except FirepoolError as err:
        where = f" (field: {err.field})" if err.field else ""
        stderr().print(f"[red]error:[/] {err.code.value}: {err.message}{where}", markup=True)
        raise typer.Exit(exit_code) from None


def connect(url: str | None, token: str | None) -> Client:
    """A client from the options, the environment or the local server's files."""
    from firepool.client import Client

    with broker_errors():
        return Client(url, token)

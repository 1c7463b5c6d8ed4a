"""What the client-side commands share: the connection options, one way to report a broker
error, and the consoles (tables on stdout, notes and errors on stderr, so `firepool run`'s
stdout carries exactly the job's output).

Everything heavy (the SDK, rich) is imported inside functions: `firepool --help` and shell
completion must not load the HTTP stack.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console
    from rich.table import Table

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
JsonFlag = Annotated[bool, typer.Option("--json", help="Same as --output json.")]


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"
    WIDE = "wide"


OutputOption = Annotated[
    Output,
    typer.Option(
        "--output",
        "-o",
        help="table, json (the API's objects), or wide (a table with more columns).",
        case_sensitive=False,
    ),
]

#: Width for a table written to a pipe or a file: wide enough that no column is ever cut
#: (rich sizes the table to its content, so nothing is padded to this width).
PIPE_WIDTH = 100_000


def emit(
    items: Sequence[BaseModel], output: Output, as_json: bool, table: Callable[[bool], Table]
) -> None:
    """Print a listing in the chosen format; `table(wide)` builds the table.

    When stdout is not a terminal (a pipe, a file, a test's capture) the table is rendered at
    its full width: rich would otherwise fit it into 80 columns and cut ids and states
    ("SUCC…"), which is exactly what a script grepping the output cannot recover from."""
    if as_json or output is Output.JSON:
        typer.echo(json.dumps([item.model_dump(mode="json") for item in items], indent=2))
        return
    console = stdout()
    if not console.is_terminal:
        console = stdout(width=PIPE_WIDTH)
    console.print(table(output is Output.WIDE))


def stdout(width: int | None = None) -> Console:
    from rich.console import Console

    return Console(highlight=False, width=width)


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

"""`firepool pods` and `firepool pools`: what the broker has warm, and what it may create."""

from __future__ import annotations

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


def pods(
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List the broker's pods (owner, session and job shown only for your own)."""
    from firepool.cli.tables import pods_table

    with connect(url, token) as client, broker_errors():
        found = client.pods()
    emit(found, output, as_json, lambda wide: pods_table(found, wide=wide))


def pools(
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List the pools (SKUs) and their scaling knobs."""
    from firepool.cli.tables import pools_table

    with connect(url, token) as client, broker_errors():
        found = client.pools()
    emit(found, output, as_json, lambda wide: pools_table(found, wide=wide))


def register(app: typer.Typer) -> None:
    app.command()(pods)
    app.command()(pools)

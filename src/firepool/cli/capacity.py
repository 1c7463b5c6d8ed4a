"""`firepool pods` and `firepool pools`: what the broker has warm, and what it may create."""

from __future__ import annotations

import json

import typer

from firepool.cli.common import JsonFlag, TokenOption, UrlOption, broker_errors, connect, stdout


def pods(as_json: JsonFlag = False, url: UrlOption = None, token: TokenOption = None) -> None:
    """List the broker's pods (owner, session and job shown only for your own)."""
    from firepool.cli.tables import pods_table

    with connect(url, token) as client, broker_errors():
        found = client.pods()
    if as_json:
        typer.echo(json.dumps([pod.model_dump(mode="json") for pod in found], indent=2))
    else:
        stdout().print(pods_table(found))


def pools(as_json: JsonFlag = False, url: UrlOption = None, token: TokenOption = None) -> None:
    """List the pools (SKUs) and their scaling knobs."""
    from firepool.cli.tables import pools_table

    with connect(url, token) as client, broker_errors():
        found = client.pools()
    if as_json:
        typer.echo(json.dumps([pool.model_dump(mode="json") for pool in found], indent=2))
    else:
        stdout().print(pools_table(found))


def register(app: typer.Typer) -> None:
    app.command()(pods)
    app.command()(pools)

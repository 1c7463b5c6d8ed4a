"""`firepool pods` and `firepool pools`: what the broker has warm, and what it may create;
`firepool pods prune` removes the pods of a broker that will not come back; `firepool pools
apply` changes pools from a catalog file (admins; a changed template rolls pods over)."""

from __future__ import annotations

from pathlib import Path

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

pods_app = typer.Typer(help="The broker's pods; `firepool pods prune` removes an old broker's.")


@pods_app.callback(invoke_without_command=True)
def pods_main(
    ctx: typer.Context,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List the broker's pods (owner, session and job shown only for your own)."""
    if ctx.invoked_subcommand is None:
        pods(output, as_json, url, token)


@pods_app.command("prune")
def prune(
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="The data directory of the broker that will not come back."
    ),
) -> None:
    """Delete every local pod (agent, zygote, jobs, files) of a broker that will not come back.
    Refused while a broker answers at the data directory's URL: it owns those pods."""
    from firepool.client.config import default_data_dir

    root = data_dir or default_data_dir()
    with broker_errors():
        removed = prune_pods(root)
    typer.echo(f"removed {removed} pod(s) under {root / 'pods'}")


def prune_pods(root: Path) -> int:
    """The pods of the broker whose data directory is `root`, deleted; their count."""
    import asyncio

    import httpx

    from firepool.backends.local import LocalBackend
    from firepool.model import ConflictError, NotFoundError

    url_file = root / "url"
    if url_file.exists():
        url = url_file.read_text().strip()
        try:
            httpx.get(f"{url}/healthz", timeout=5.0)
        except httpx.HTTPError:
            pass  # nobody answers: the broker is gone
        else:
            raise ConflictError(
                f"a broker answers at {url} for {root}: stop it (or delete its pods with "
                "`firepool serve --delete-pods`) instead",
                field="data_dir",
            )
    pods_dir = root / "pods"
    if not pods_dir.is_dir():
        raise NotFoundError(f"no pods directory under {root}", field="data_dir")

    async def delete_all() -> int:
        backend = LocalBackend(pods_dir)
        found = await backend.list_pods()
        for pod in found:
            await backend.delete(pod.name)
        await backend.close()
        return len(found)

    return asyncio.run(delete_all())


def pods(
    output: Output = Output.TABLE,
    as_json: bool = False,
    url: str | None = None,
    token: str | None = None,
) -> None:
    """List the broker's pods (owner, session and job shown only for your own)."""
    from firepool.cli.tables import pods_table

    with connect(url, token) as client, broker_errors():
        found = client.pods()
    emit(found, output, as_json, lambda wide: pods_table(found, wide=wide))


pools_app = typer.Typer(help="The pools; `firepool pools apply` changes them (admins).")


@pools_app.callback(invoke_without_command=True)
def pools_main(
    ctx: typer.Context,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List the pools (SKUs), their scaling knobs and each one's template rollout."""
    if ctx.invoked_subcommand is None:
        pools(output, as_json, url, token)


def pools(
    output: Output = Output.TABLE,
    as_json: bool = False,
    url: str | None = None,
    token: str | None = None,
) -> None:
    from firepool.cli.tables import pools_table

    with connect(url, token) as client, broker_errors():
        status = client.pool_status()
    found = status.pools
    emit(found, output, as_json,
         lambda wide: pools_table(found, wide=wide, rollouts=status.rollouts))


@pools_app.command("apply")
def apply(
    catalog: Path = typer.Argument(..., help="A catalog file (TOML or YAML) naming the pools."),
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Apply each pool of a catalog file to the running broker (an admin token). A changed
    template (image, shape, preloaded modules, or a higher template_version) rolls the pool's
    pods over: idle old pods first, busy ones after their job, drain_budget at a time.
    Budgets and scaler knobs of the file are the broker's start-up settings, not applied."""
    from firepool.cli.tables import pools_table
    from firepool.model import UnknownPoolError
    from firepool.service.catalog import load_catalog

    with broker_errors():
        wanted = load_catalog(catalog)
    with connect(url, token) as client, broker_errors():
        known = {p.name for p in client.pools()}
        unknown = [spec.name for spec in wanted.pools if spec.name not in known]
        if unknown:  # refuse before changing anything
            raise UnknownPoolError(
                f"{catalog}: the broker has no pool {', '.join(map(repr, unknown))} "
                f"(it has {', '.join(sorted(known))}); pools are added at start-up",
                field="pools",
            )
        applied = [client.apply_pool(spec) for spec in wanted.pools]
    specs = [a.pool for a in applied]
    rollouts = [a.rollout for a in applied]
    emit(specs, output, as_json, lambda wide: pools_table(specs, wide=wide, rollouts=rollouts))


def register(app: typer.Typer) -> None:
    app.add_typer(pods_app, name="pods")
    app.add_typer(pools_app, name="pools")

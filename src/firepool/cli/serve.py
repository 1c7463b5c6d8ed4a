"""`firepool serve` and `firepool token create`: the embedded broker from the command line."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from firepool.client.config import default_data_dir
from firepool.model import ConfigError, FirepoolError, TokenRole
from firepool.service.tuning import run_serving

if TYPE_CHECKING:
    from firepool.backends.kubernetes import KubernetesSettings

log = logging.getLogger("firepool.serve")


def serve(
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="State: store, packages, pods, logs."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8321, help="Port to listen on (0: any free port)."),
    store: str | None = typer.Option(
        None,
        "--store",
        envvar="FIREPOOL_STORE_URL",
        help="postgresql://... or mysql://...; default: SQLite in the data dir.",
    ),
    catalog: Path | None = typer.Option(None, "--catalog", help="Pool catalog (TOML or YAML)."),
    fake_gpus: int = typer.Option(0, "--fake-gpus", help="Pretend this many GPUs exist."),
    capacity_source: str | None = typer.Option(
        None,
        "--capacity-source",
        help="Borrowable capacity to poll: file:PATH or an http(s) URL answering "
        '{"H200": 2} (units per model the broker may borrow).',
    ),
    capacity_poll_s: float = typer.Option(
        10.0, "--capacity-poll-s", help="Seconds between reads of --capacity-source."
    ),
    isolation: str = typer.Option(
        "auto",
        help="Pod isolation: auto, private or weak. Weak (shared /tmp, /var/tmp, /dev/shm and "
        "IPC between pods) serves several callers only when asked for by name.",
    ),
    delete_pods: bool = typer.Option(
        False, "--delete-pods", help="Delete every pod on shutdown (default: keep them warm)."
    ),
    log_level: str = typer.Option("info", "--log-level"),
    backend: str = typer.Option("local", "--backend", help="Pods: local processes or kubernetes."),
    namespace: str = typer.Option(
        "default", "--namespace", help="Kubernetes namespace of the pods (--backend kubernetes)."
    ),
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="Kubeconfig file; default: in-cluster config inside a pod."
    ),
    pod_templates: Path | None = typer.Option(
        None, "--pod-templates", help="Per-pool Kubernetes placement (YAML or TOML)."
    ),
    api_qps: float = typer.Option(
        100.0, "--api-qps", help="Writes/s to the API server (pods, Secrets, patches)."
    ),
    agent_port: int = typer.Option(7070, "--agent-port", help="The pods' agent port."),
    advertise_url: str | None = typer.Option(
        None,
        "--advertise-url",
        envvar="FIREPOOL_ADVERTISE_URL",
        help="Where the pods' agents reach the broker (in a cluster: the broker Service's "
        "URL); default: the listen address, which a cluster's pods cannot use if it is "
        "0.0.0.0 or loopback.",
    ),
) -> None:
    """Run the broker: API, dispatcher, scaler and pods, until SIGINT or SIGTERM."""
    from firepool.composition import EmbeddedBroker, agents_url
    from firepool.service import logs
    from firepool.service.broker import BrokerConfig
    from firepool.service.capacity import open_capacity_source
    from firepool.service.catalog import load_catalog

    logs.configure(log_level)
    if isolation not in ("auto", "private", "weak"):
        raise typer.BadParameter("choose auto, private or weak", param_hint="--isolation")
    if backend not in ("local", "kubernetes"):
        raise typer.BadParameter("choose local or kubernetes", param_hint="--backend")
    root = data_dir or default_data_dir()
    try:
        pools = load_catalog(catalog) if catalog else None
        borrowable = open_capacity_source(capacity_source) if capacity_source else None
        if not capacity_poll_s > 0:
            raise ConfigError("--capacity-poll-s must be > 0", field="capacity_poll_s")
        cluster = (
            kubernetes_settings(namespace, kubeconfig, pod_templates, api_qps, agent_port)
            if backend == "kubernetes"
            else None
        )
        agents_url(host, port, advertise_url, pods_on_this_host=cluster is None)
    except FirepoolError as err:
        typer.echo(f"error: {err.message}", err=True)
        raise typer.Exit(2) from None
    if isolation != "weak" and backend == "local":  # a cluster isolates by its containers
        from firepool.backends.local import probe_unshare

        private_ok = probe_unshare() is not None
        callers = [] if private_ok else _callers_with_tokens(store, root)
        refusal = isolation_refusal(isolation, private_ok, callers)
        if refusal is not None:
            typer.echo(f"error: {refusal}", err=True)
            raise typer.Exit(2)
        if not private_ok:
            log.warning("pods get weak isolation on this host; serving one caller only")
    fakes = [f"fake-{i}" for i in range(fake_gpus)] if fake_gpus else None

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with EmbeddedBroker(
            root,
            store_url=store,
            catalog=pools,
            host=host,
            port=port,
            isolation=isolation,  # type: ignore[arg-type]
            fake_devices=fakes,
            delete_pods_on_exit=delete_pods,
            tune_gc=True,
            backend="kubernetes" if cluster is not None else "local",
            kubernetes=cluster,
            capacity=borrowable,
            config=BrokerConfig(capacity_poll_s=capacity_poll_s),
            advertise_url=advertise_url,
        ) as broker:
            log.info("serving on %s (data dir %s); token in %s", broker.url, root, root / "token")
            typer.echo(f"firepool serving on {broker.url}", err=True)
            await stop.wait()
            log.info("shutting down")

    run_serving(run())


def kubernetes_settings(
    namespace: str,
    kubeconfig: str | None,
    templates: Path | None,
    qps: float,
    agent_port: int,
) -> KubernetesSettings:
    """`--backend kubernetes` options as the backend's settings (typed errors name the flag's
    field)."""
    from firepool.backends.kubernetes import KubernetesSettings, Templates
    from firepool.backends.kubernetes.settings import load_templates

    return KubernetesSettings(
        namespace=namespace,
        kubeconfig=kubeconfig,
        qps=qps,
        burst=max(1, int(qps)),
        agent_port=agent_port,
        templates=load_templates(templates) if templates else Templates(),
    )


def isolation_refusal(requested: str, private_ok: bool, callers: Sequence[str]) -> str | None:
    """Why `serve` must not start, or None. Weak pods share /tmp, /var/tmp, /dev/shm and IPC
    with the host and each other, so two callers could read each other's files: that is only
    acceptable when the operator said `--isolation weak` (a single-user laptop)."""
    if private_ok or requested == "weak":
        return None
    if requested == "private":
        return "--isolation private needs root and mount/IPC namespaces (unshare) on this host"
    if len(callers) > 1:
        return (
            f"this host gives pods only weak isolation (shared /tmp, /var/tmp, /dev/shm and "
            f"IPC), and {len(callers)} callers have tokens ({', '.join(callers[:5])}): their "
            f"jobs could read each other's files. Run as root with unshare for private pods, "
            f"or start with --isolation weak to accept that"
        )
    return None


def _callers_with_tokens(store_url: str | None, data_dir: Path) -> list[str]:
    import sqlalchemy as sa

    from firepool.store import open_store
    from firepool.store.schema import tokens

    data_dir.mkdir(parents=True, exist_ok=True)
    handle = open_store(store_url, data_dir=data_dir)
    try:
        query = sa.select(tokens.c.caller).where(tokens.c.revoked == sa.false()).distinct()
        with handle.engine.connect() as conn:
            return sorted(conn.execute(query).scalars())
    finally:
        handle.close()


token_app = typer.Typer(no_args_is_help=True, help="Manage caller tokens.")


@token_app.command("create")
def token_create(
    name: str = typer.Argument(..., help="The caller this token authenticates."),
    data_dir: Path | None = typer.Option(None, "--data-dir"),
    store: str | None = typer.Option(None, "--store", envvar="FIREPOOL_STORE_URL"),
    role: TokenRole = typer.Option(
        TokenRole.CALLER,
        "--role",
        help="caller: submit and see its own jobs and pods; admin: also change pools and "
        "see every caller's pods in full.",
    ),
) -> None:
    """Mint a token for a caller and print it (only its hash is stored)."""
    from firepool.api.auth import issue_token
    from firepool.store import open_store

    handle = open_store(store, data_dir=data_dir or default_data_dir())
    try:
        typer.echo(issue_token(handle, name, role=role))
    finally:
        handle.close()

"""The composition root: the one place that wires a store, a package store, log storage, a pod
backend, the broker core's driver and the API into one process and one event loop. Faces and
drivers never import each other; this module imports both. `firepool serve`, the demo, the
benchmarks and the end-to-end tests all build their broker here (`EmbeddedBroker`).

On start it writes `<data-dir>/url` and, on first start, a default caller token to
`<data-dir>/token` (0600), which the SDK and CLI read when FIREPOOL_URL / FIREPOOL_TOKEN are
not set.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import uvicorn

from firepool.api.app import create_app
from firepool.api.auth import issue_token
from firepool.backends.base import PodBackend
from firepool.backends.local import IsolationChoice, LocalBackend
from firepool.client.config import URL_FILE
from firepool.control.budgets import BudgetLedger
from firepool.model import ConfigError, TokenRole
from firepool.packages.disk import DiskPackageStore
from firepool.service.broker import Broker, BrokerConfig
from firepool.service.capacity import CapacitySource
from firepool.service.catalog import Catalog, machine_catalog
from firepool.service.tuning import tune_gc_for_serving
from firepool.store import SqlJobStore, open_store
from firepool.store.logs import RankLogStorage
from firepool.store.tokens import hash_token

if TYPE_CHECKING:
    from firepool.backends.kubernetes import KubernetesSettings

DEFAULT_CALLER = "local"

BackendKind = Literal["local", "kubernetes"]


def build_backend(
    kind: str,
    pods_dir: Path,
    *,
    isolation: IsolationChoice = "auto",
    fake_devices: Sequence[str] | None = None,
    faults: Sequence[str] = (),
    kubernetes: KubernetesSettings | None = None,
    local_images: dict[str, str] | None = None,
    network_namespace: bool = True,
) -> PodBackend:
    """The one place that chooses the pod backend (`firepool serve --backend`).

    The Kubernetes backend is imported only when chosen, so local use never loads the
    cluster client."""
    if kind == "kubernetes":
        from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings

        return KubernetesBackend(kubernetes or KubernetesSettings())
    if kind != "local":
        raise ConfigError(f"unknown backend {kind!r}: choose local or kubernetes", field="backend")
    return LocalBackend(
        pods_dir,
        isolation=isolation,
        fake_devices=fake_devices,
        faults=faults,
        broker_silence_s="keep-alive",  # a broker that never comes back leaves nothing running
        images=local_images,
        network_namespace=network_namespace,
    )


def agents_url(
    listen_host: str, port: int, advertise_url: str | None, *, pods_on_this_host: bool
) -> str:
    """Where the pods' agents reach the broker (exit events, code packages).

    An address given (`--advertise-url`, FIREPOOL_ADVERTISE_URL) wins. Else the listen
    address, which only works where it is one a pod can dial: a wildcard (0.0.0.0, ::) means
    the host's loopback for local pods, and is no address at all for a cluster's pods; so is a
    loopback address."""
    if advertise_url:
        parts = urlsplit(advertise_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"advertise URL {advertise_url!r} is not http(s)://host[:port]",
                field="advertise_url",
            )
        return advertise_url.rstrip("/")
    host = listen_host.strip("[]")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None  # a host name: taken as given
    unreachable = address is not None and (address.is_unspecified or address.is_loopback)
    if address is not None and address.is_unspecified and pods_on_this_host:
        host, unreachable = "127.0.0.1", False
    if unreachable and not pods_on_this_host:
        raise ConfigError(
            f"the broker listens on {listen_host}, which the cluster's pods cannot reach: "
            "give --advertise-url (in a cluster, the broker Service's URL, such as "
            "http://firepool.<namespace>.svc:8321)",
            field="advertise_url",
        )
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class EmbeddedBroker:
    def __init__(
        self,
        data_dir: Path,
        *,
        store_url: str | None = None,
        store_options: dict[str, Any] | None = None,
        catalog: Catalog | None = None,
        config: BrokerConfig | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        isolation: IsolationChoice = "auto",
        fake_devices: Sequence[str] | None = None,
        faults: Sequence[str] = (),
        delete_pods_on_exit: bool = True,
        tune_gc: bool = False,
        backend: BackendKind = "local",
        kubernetes: KubernetesSettings | None = None,
        capacity: CapacitySource | None = None,
        advertise_url: str | None = None,
        network_namespace: bool = True,
    ) -> None:
        self.data_dir = Path(data_dir)
        #: Local pods' own network namespaces (False: the host's network, for measuring them).
        self.network_namespace = network_namespace
        self.capacity = capacity
        self.store_url = store_url
        self.store_options = dict(store_options or {})
        self.catalog = catalog
        self.config = config or BrokerConfig()
        self.host = host
        self.port = port
        self.isolation: IsolationChoice = isolation
        self.fake_devices = fake_devices
        self.faults = tuple(faults)
        self.delete_pods_on_exit = delete_pods_on_exit
        self.tune_gc = tune_gc  # for a process that is the broker (firepool serve)
        self.backend_kind: BackendKind = backend
        self.kubernetes = kubernetes
        self.advertise_url = advertise_url or os.environ.get("FIREPOOL_ADVERTISE_URL") or None
        self.url = ""
        #: Where agents reach this broker (`agents_url`); set on start.
        self.agents_url = ""
        self.token = ""

    async def __aenter__(self) -> EmbeddedBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store: SqlJobStore = await asyncio.to_thread(
            lambda: open_store(self.store_url, data_dir=self.data_dir, **self.store_options)
        )
        self.packages = DiskPackageStore(self.data_dir / "packages")
        logs = RankLogStorage(self.data_dir / "logs")
        self.backend = build_backend(
            self.backend_kind,
            self.data_dir / "pods",
            isolation=self.isolation,
            fake_devices=self.fake_devices,
            faults=self.faults,
            kubernetes=self.kubernetes,
            local_images=self.catalog.local_images if self.catalog is not None else None,
            network_namespace=self.network_namespace,
        )
        # Refused before anything listens: a cluster's pods must be able to call back.
        agents_url(
            self.host,
            self.port,
            self.advertise_url,
            pods_on_this_host=self.backend.capabilities.pods_on_this_host,
        )
        if self.catalog is None:
            models: dict[str, int] = {}
            for device in getattr(self.backend, "devices", ()):  # local GPUs; none on a cluster
                models[device.model] = models.get(device.model, 0) + 1
            self.catalog = machine_catalog(models)
        self.backend.check_pools(self.catalog.pools)
        self.broker = Broker(
            store=self.store,
            backend=self.backend,
            pools=self.catalog.pools,
            ledger=BudgetLedger(self.catalog.budgets),
            logs=logs,
            packages=self.packages,
            config=dataclasses.replace(
                self.config,
                scaler=self.catalog.scaler,
                max_gpus_per_caller=self.catalog.max_gpus_per_caller,
            ),
            checkpoint_root=self.data_dir / "checkpoints",
            capacity=self.capacity,
        )
        app = create_app(
            self.store,
            self.packages,
            self.broker.specs.values,  # live: an admin's pool edit shows at once
            hooks=self.broker,
            logs=logs,
            data_dir=self.data_dir,
        )
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=self.host,
                port=self.port,
                log_level="warning",
                access_log=False,
                lifespan="off",
            )
        )
        self._serving = asyncio.create_task(self.server.serve())
        while not self.server.started:
            if self._serving.done():
                self._serving.result()  # raises the bind error
            await asyncio.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = agents_url(self.host, port, None, pods_on_this_host=True)
        self.agents_url = agents_url(
            self.host,
            port,
            self.advertise_url,
            pods_on_this_host=self.backend.capabilities.pods_on_this_host,
        )
        self.token = await asyncio.to_thread(self._default_token)
        publish_file(self.data_dir / URL_FILE, self.url + "\n")
        await self.broker.start(self.agents_url)
        if self.tune_gc:
            tune_gc_for_serving()
        return self

    def _default_token(self) -> str:
        path = self.data_dir / "token"
        if path.exists():
            token = path.read_text().strip()
            if self.store.caller_for_token(hash_token(token)) is not None:
                return token
        token = issue_token(self.store, DEFAULT_CALLER)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
        return token

    def issue(self, caller: str, role: TokenRole = TokenRole.CALLER) -> str:
        """A token for another caller (tests and the demo act as several callers)."""
        return issue_token(self.store, caller, role=role)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.broker.close(delete_pods=self.delete_pods_on_exit)
        self.server.should_exit = True
        await asyncio.gather(self._serving, return_exceptions=True)
        await asyncio.to_thread(self.store.close)


def publish_file(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all. Local clients wait for the broker's `url`
    file to appear and read it at once (the SDK's defaults, `firepool` commands, scripts):
    written in place, it exists empty for a moment, and a reader then got an empty URL (seen
    in a restart test as "Request URL is missing an 'http://' or 'https://' protocol")."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

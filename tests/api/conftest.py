"""A real broker API on a real socket: SQLite store, disk packages, uvicorn on port 0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_harness import POOLS, Api, RecordingHooks
from starlette.types import ASGIApp, Receive, Scope, Send

from firepool.api import create_app, issue_token
from firepool.api.server import ServedApp
from firepool.packages import DiskPackageStore
from firepool.store import open_store
from firepool.store.logs import RankLogStorage


class Switch:
    """One uvicorn for the whole session, serving whichever app the current test built:
    starting and stopping a server per test would cost more than the tests themselves."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "no app installed for this test"
        await self.app(scope, receive, send)


@pytest.fixture(scope="session")
def server() -> Iterator[tuple[ServedApp, Switch, httpx.HTTPTransport]]:
    switch = Switch()
    # One transport for all clients: building one loads TLS certificates (~0.1 s each).
    transport = httpx.HTTPTransport()
    with ServedApp(switch) as served:
        yield served, switch, transport
    transport.close()


@pytest.fixture
def api(tmp_path: Path, server: tuple[ServedApp, Switch, httpx.HTTPTransport]) -> Iterator[Api]:
    served, switch, transport = server
    store = open_store(data_dir=tmp_path)
    packages = DiskPackageStore(tmp_path / "packages", max_bytes=256 * 1024)
    logs = RankLogStorage(tmp_path / "logs")
    hooks = RecordingHooks()
    app = create_app(store, packages, POOLS, hooks=hooks, logs=logs, json_body_bytes=64 * 1024)
    switch.app = app
    tokens = {name: issue_token(store, name) for name in ("alice", "bob")}

    def client(token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=served.url, headers=headers, timeout=30, transport=transport)

    clients = [client(tokens["alice"]), client(tokens["bob"]), client(None)]
    try:
        yield Api(
            served.url, store, packages, logs, hooks, *clients, context=app.state.firepool, app=app
        )
    finally:
        switch.app = None
        store.close()

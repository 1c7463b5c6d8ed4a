"""The CLI against a real API on a real socket (and, for `run` and `pods`, the whole broker
with real local pods). Commands run in-process through typer's CliRunner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import Invoke, invoker

from firepool.api.server import ServedApp
from firepool.testing.broker import AppSwitch, LiveBroker, live_broker
from firepool.testing.service import BrokerThread, running_broker


@pytest.fixture(scope="session")
def served() -> Iterator[tuple[ServedApp, AppSwitch]]:
    switch = AppSwitch()
    with ServedApp(switch) as server:
        yield server, switch


@pytest.fixture
def broker(tmp_path: Path, served: tuple[ServedApp, AppSwitch]) -> Iterator[LiveBroker]:
    server, switch = served
    with live_broker(switch, server.url, tmp_path) as live:
        yield live


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with running_broker(tmp_path_factory.mktemp("broker")) as whole:
        yield whole


@pytest.fixture
def cli(broker: LiveBroker) -> Invoke:
    """`firepool ...` as alice against the API-only broker."""
    return invoker(broker.url, broker.tokens["alice"])


@pytest.fixture
def cli_e2e(embedded: BrokerThread) -> Invoke:
    """`firepool ...` against the whole broker."""
    return invoker(embedded.url, embedded.token)

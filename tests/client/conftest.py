"""The SDK against a real API on a real socket (see `firepool.testing.broker`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.api.server import ServedApp
from firepool.client import Client
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


@pytest.fixture
def client(broker: LiveBroker) -> Iterator[Client]:
    with Client(broker.url, broker.tokens["alice"]) as sdk:
        yield sdk


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """The whole broker with real local pods (one per session: pods take a second to start)."""
    with running_broker(tmp_path_factory.mktemp("broker")) as broker:
        yield broker

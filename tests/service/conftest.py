"""End-to-end fixtures: a real embedded broker (API over HTTP, local pods) per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.model import LeaseTagMode, NetworkAccess
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.store.scratch import scratch
from firepool.testing.control import cpu_pool
from firepool.testing.databases import KINDS, require_server
from firepool.testing.service import BrokerThread, running_broker

FAST = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)


def catalog(cpu_budget: int = 8) -> Catalog:
    base = {"idle_timeout": 30.0, "memory_mib_per_pod": 512, "step": 4}
    return Catalog(
        (
            cpu_pool(min_count=1, max_idle_count=1, max_count=4, **base),
            cpu_pool("hint", max_count=2, lease_tag_mode=LeaseTagMode.HINT, **base),
            cpu_pool("short", max_count=2, caller_hold_seconds=1.0, **base),
            cpu_pool("burst", max_count=4, caller_hold_seconds=0.3, **base),
            cpu_pool("small", max_count=1, idle_timeout=30.0, memory_mib_per_pod=96, step=1),
            # For jobs that call the test (or the broker's API) over the host's loopback: a
            # pod's own network namespace reaches nothing outside it.
            cpu_pool("loopback", max_count=2, network=NetworkAccess.HOST, **base),
        ),
        {"cpu": cpu_budget},
    )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    with running_broker(tmp_path / "broker", catalog=catalog(), config=FAST) as handle:
        yield handle


@pytest.fixture(params=KINDS)
def broker_on(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerThread]:
    """The same broker on each store: SQLite, PostgreSQL and MariaDB."""
    server = require_server(request.param)
    with (
        scratch(request.param, server_url=server, data_dir=tmp_path) as db,
        running_broker(
            tmp_path / "broker",
            store_url=db.url,
            store_options=db.engine_options,
            catalog=catalog(),
            config=FAST,
        ) as handle,
    ):
        yield handle


@pytest.fixture
def tight_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A CPU budget of 3 cores, under pool ceilings that add up to more."""
    with running_broker(tmp_path / "tight", catalog=catalog(cpu_budget=3), config=FAST) as handle:
        yield handle

"""The database stopped and started again under a running broker: nothing lost, nothing twice.

A private PostgreSQL and a private MariaDB (never the shared servers) are stopped while a job
runs. Submissions meanwhile get a typed 503 with `Retry-After`; the running job keeps running,
exits on its pod, and its verdict is committed once the server is back; the SDK's
submissions sent during the outage (blocking and asyncio clients) land exactly once.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from firepool.client import AsyncClient, Client
from firepool.model import StoreUnavailableError
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.databases import start_private_server
from firepool.testing.private_db import PrivateServer
from firepool.testing.service import BrokerThread, running_broker, wait_job

FAST = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)

#: One pod: a job queued behind the running one is dispatched, and its start committed, only
#: once the running one has ended, which happens during the outage.
CATALOG = Catalog(
    # network host: its jobs report to the test over the host's loopback
    (cpu_pool(network="host", min_count=1,
              max_idle_count=1, max_count=1, memory_mib_per_pod=512),),
    {"cpu": 4},
)


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[PrivateServer]:
    private = start_private_server(request.param)
    try:
        yield private
    finally:
        private.close()


def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Release:
    """A job that runs until the test releases it: it connects here and waits for a byte (a
    pod has its own /tmp, so a flag file would not reach it; the loopback does)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(60.0)
        self._conn: socket.socket | None = None
        port = self._listener.getsockname()[1]
        self.command = [
            sys.executable,
            "-c",
            f"import socket; socket.create_connection(('127.0.0.1', {port})).recv(1); "
            "print('finished while the store was down', flush=True)",
        ]

    def release(self) -> None:
        if self._conn is None:
            self._conn, _ = self._listener.accept()
        self._conn.sendall(b"x")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._listener.close()


def attempt_over(broker: BrokerThread, job_id: str) -> bool:
    """The broker saw the attempt end and reset its pods (its verdict is decided)."""
    return broker.call(lambda: job_id not in broker.embedded.broker.running)


def test_store_restart_loses_nothing_and_runs_nothing_twice(
    server: PrivateServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if not server.running:
        server.start()  # an earlier failure left it down
    gate = Release()
    with running_broker(
        tmp_path / "broker", store_url=server.create_database(), catalog=CATALOG, config=FAST
    ) as broker:
        sdk = Client(broker.url, broker.token, retry_s=120.0)
        raw = broker.client()
        try:
            job = sdk.submit("cpu", gate.command)
            until(lambda: sdk.get(job.id).state.value == "RUNNING", "the job to run")
            behind = sdk.submit("cpu", ["true"])

            server.stop()
            refused = raw.post("/v1/jobs", json={"pool": "cpu", "command": ["true"]})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "StoreUnavailable"
            assert int(refused.headers["Retry-After"]) >= 1

            gate.release()  # the job ends while the store is down
            until(lambda: attempt_over(broker, job.id), "the attempt to end on its pod")

            # Submissions sent during the outage wait it out and land once it is over.
            landed: dict[str, Any] = {}
            threads = [
                threading.Thread(target=_submit_blocking, args=(sdk, landed)),
                threading.Thread(target=_submit_async, args=(broker, landed)),
            ]
            for thread in threads:
                thread.start()
            time.sleep(1.0)  # both have met the 503 at least once
            assert not landed, "a submission succeeded while the store was down"
            # The queued job got the freed pod: its start waits for the store too.
            until(lambda: f"the start of {behind.id}:0" in caplog.text, "the queued job's start")
            server.start()
            for thread in threads:
                thread.join(timeout=120)
            assert set(landed) == {"blocking", "async"}, landed

            done = sdk.wait(job.id, timeout=120)
            assert (done.state.value, done.exit_code, done.retries) == ("SUCCEEDED", 0, 0)
            assert "".join(sdk.logs(job.id)) == "finished while the store was down\n"
            attempts = broker.embedded.store.attempts(job.id)
            assert [(a.id, a.state.value) for a in attempts] == [(f"{job.id}:0", "SUCCEEDED")]

            for later in [behind, *landed.values()]:
                assert sdk.wait(later.id, timeout=120).state.value == "SUCCEEDED"
                assert len(broker.embedded.store.attempts(later.id)) == 1  # ran once
            ids = sorted(j.id for j in sdk.list())
            assert ids == sorted([job.id, behind.id, *(j.id for j in landed.values())])
        finally:
            gate.close()
            raw.close()
            sdk.close()
            if not server.running:
                server.start()


def _submit_blocking(sdk: Client, landed: dict[str, Any]) -> None:
    landed["blocking"] = sdk.submit("cpu", ["true"])


def _submit_async(broker: BrokerThread, landed: dict[str, Any]) -> None:
    async def submit() -> Any:
        async with AsyncClient(broker.url, broker.token, retry_s=120.0) as client:
            return await client.submit("cpu", ["true"])

    landed["async"] = asyncio.run(submit())


def test_a_store_down_answers_typed_503s_to_reads_too(
    server: PrivateServer, tmp_path: Path
) -> None:
    if not server.running:
        server.start()
    with running_broker(
        tmp_path / "broker", store_url=server.create_database(), catalog=CATALOG, config=FAST
    ) as broker:
        with broker.client() as raw:
            job_id = raw.post("/v1/jobs", json={"pool": "cpu", "command": ["true"]}).json()["id"]
            server.stop()
            try:
                for answer in (raw.get(f"/v1/jobs/{job_id}"), raw.get("/v1/jobs")):
                    assert answer.status_code == 503, answer.text
                    assert answer.json()["error"] == "StoreUnavailable"
                    assert "Retry-After" in answer.headers
            finally:
                server.start()
            assert wait_job(raw, job_id)["state"] == "SUCCEEDED"
        with Client(broker.url, broker.token, retry_s=0.0) as impatient:
            server.stop()
            try:
                with pytest.raises(StoreUnavailableError):
                    impatient.get(job_id)
            finally:
                server.start()

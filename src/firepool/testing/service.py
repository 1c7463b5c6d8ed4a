"""A real embedded broker on a background event loop, for tests, benchmarks and the demo.

Synchronous code (pytest tests, the demo's progress bar) talks to it over real HTTP; the
broker, its API and its local pods run on their own thread's event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from firepool.composition import EmbeddedBroker
from firepool.model import TokenRole
from firepool.testing.waiting import wait_until

T = TypeVar("T")

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


class BrokerThread:
    def __init__(self, embedded: EmbeddedBroker) -> None:
        self.embedded = embedded
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return self.embedded.url

    @property
    def token(self) -> str:
        return self.embedded.token

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the broker's loop (the tracker and broker state live there)."""

        async def wrapper() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout=30)

    def run(self, coro: Any, timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=timeout)

    def issue(self, caller: str, role: TokenRole = TokenRole.CALLER) -> str:
        """A token for another caller (an admin one with `role=TokenRole.ADMIN`)."""
        return self.embedded.issue(caller, role)

    def client(self, caller: str | None = None, role: TokenRole = TokenRole.CALLER) -> httpx.Client:
        token = self.token if caller is None else self.issue(caller, role)
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
        )

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@contextmanager
def running_broker(data_dir: Path, **options: Any) -> Iterator[BrokerThread]:
    """An EmbeddedBroker (same options) serving on 127.0.0.1 with a free port."""
    options.setdefault("delete_pods_on_exit", True)
    handle = BrokerThread(EmbeddedBroker(data_dir, **options))
    try:
        handle.run(handle.embedded.__aenter__())
        yield handle
    finally:
        try:
            handle.run(handle.embedded.__aexit__(None, None, None), timeout=60)
        finally:
            handle.stop()


def wait_job(client: httpx.Client, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Poll until the job is terminal; returns its final JSON."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").raise_for_status().json()
        if job["state"] in TERMINAL:
            return job
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {job['state']} after {timeout}s")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.2)


def settled(broker: BrokerThread, name: str, timeout: float = 30.0) -> str | None:
    """The pod's state once its job and reset are over (None if it is gone by then): a job's
    verdict is durable, and the caller sees it, while its pods are still being reset."""
    seen: list[str | None] = [None]

    def state() -> str | None:  # read on the broker's loop, where the tracker changes
        pod = broker.embedded.broker.tracker.get(name)
        return None if pod is None else pod.state.value

    def over() -> bool:
        seen[0] = broker.call(state)
        return seen[0] not in ("assigned", "running")

    wait_until(f"pod {name} out of its job and reset", over, timeout)
    return seen[0]


def wait_pod(
    client: httpx.Client, name: str, state: str = "held", timeout: float = 30.0
) -> dict[str, Any]:
    """Poll `/v1/pods` until the pod is in `state`; returns its JSON. Over HTTP, for a broker
    in another process (a held pod's hold starts once its reset is over)."""
    found: dict[str, Any] = {}

    def there() -> bool:
        pods = client.get("/v1/pods").raise_for_status().json()["pods"]
        found.clear()
        found.update(next((p for p in pods if p["name"] == name), {}))
        return found.get("state") == state

    wait_until(f"pod {name} {state}", there, timeout)
    return found


def submit(client: httpx.Client, **spec: Any) -> str:
    spec.setdefault("pool", "cpu")
    resp = client.post("/v1/jobs", json=spec)
    if resp.status_code != 201:
        raise AssertionError(f"submit failed: {resp.status_code} {resp.text}")
    job_id: str = resp.json()["id"]
    return job_id


def run(client: httpx.Client, timeout: float = 60.0, **spec: Any) -> dict[str, Any]:
    return wait_job(client, submit(client, **spec), timeout)

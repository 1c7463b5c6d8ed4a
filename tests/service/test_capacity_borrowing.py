"""Borrowed capacity on real local pods with fake GPUs, through a file capacity source: a
grant lets the scaler create; a reclaim gives back the idle pod first, then preempts the
youngest job, whose attempt ends `Reclaimed` and is retried (though it allows no retries) and
succeeds; the older job is never touched."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from firepool.control.dispatch import AttemptEnd, judge
from firepool.model import AcquisitionPath, ConfigError, JobErrorClass, JobSpec, PodState
from firepool.service.broker import BrokerConfig
from firepool.service.capacity import FileCapacitySource, open_capacity_source, parse_reading
from firepool.service.catalog import Catalog
from firepool.service.tickets import ticket_of
from firepool.store import PodBinding, open_store
from firepool.testing.control import gpu_pool
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job
from firepool.testing.switch import Switch
from firepool.testing.waiting import wait_until

# network host: its jobs wait on a loopback switch (firepool.testing.switch)
GPU = gpu_pool(network="host", accelerator="fake", min_count=2,
               max_idle_count=2, max_count=2, caller_hold_seconds=600.0, idle_timeout=600.0,
               memory_mib_per_pod=512, step=2)


def grant(path: Path, cards: int) -> None:
    """What a capacity controller does: rewrite its file atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fake": cards}))
    os.replace(tmp, path)


def pods(broker: BrokerThread) -> dict[str, PodState]:
    tracker = broker.embedded.broker.tracker
    return broker.call(lambda: {p.name: p.state for p in tracker.pool_pods("gpu")})


def job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").raise_for_status().json()
    return found


def state_is(client: httpx.Client, job_id: str, state: str) -> Callable[[], bool]:
    return lambda: job(client, job_id)["state"] == state


def test_idle_cards_go_back_first_then_the_youngest_job_is_reclaimed(tmp_path: Path) -> None:
    grants = tmp_path / "capacity.json"
    grant(grants, 2)
    config = BrokerConfig(capacity_poll_s=0.2, reconcile_s=2.0, exit_poll_s=0.5)
    gate_a, gate_b = Switch(), Switch()
    with running_broker(tmp_path / "b", catalog=Catalog((GPU,), {"fake": 0}), config=config,
                        fake_devices=["GPU-0", "GPU-1"],
                        capacity=FileCapacitySource(grants)) as broker:
        ledger = broker.embedded.broker.ledger
        wait_until("two borrowed pods ready", lambda: list(pods(broker).values()) == [
            PodState.IDLE, PodState.IDLE], timeout=120.0)
        alice, bob = broker.client("alice"), broker.client("bob")
        a = submit(alice, pool="gpu", command=gate_a.job(), max_retries=0)
        wait_until("alice's job runs", state_is(alice, a, "RUNNING"))
        (a_pod,) = [p["name"] for p in job(alice, a)["pods"]]

        grant(grants, 1)  # the owner takes one card back: the idle pod goes
        wait_until("the idle pod given back", lambda: list(pods(broker)) == [a_pod])
        assert broker.call(lambda: ledger.used("fake")) == 1
        assert job(alice, a)["state"] == "RUNNING"

        grant(grants, 2)  # lent again: the scaler refills the floor
        wait_until("a second pod", lambda: len(pods(broker)) == 2, timeout=120.0)
        b = submit(bob, pool="gpu", command=gate_b.job(first_attempt_only=True), max_retries=0)
        wait_until("bob's job runs", state_is(bob, b, "RUNNING"), timeout=120.0)

        grant(grants, 1)  # no idle pod left: the youngest job gives its card back
        wait_until("bob's attempt reclaimed", lambda: job(bob, b)["retries"] == 1)
        assert job(bob, b)["state"] == "QUEUED"
        first = broker.embedded.store.attempts(b)[0]
        assert (first.retry, first.error_class) == (0, JobErrorClass.RECLAIMED)
        wait_until("the reclaimed card is free", lambda: list(pods(broker)) == [a_pod])
        assert job(alice, a)["state"] == "RUNNING"  # the older job kept its card

        grant(grants, 2)  # lent once more: bob's retry runs and succeeds
        done_b = wait_job(bob, b, timeout=120.0)
        assert (done_b["state"], done_b["retries"]) == ("SUCCEEDED", 1)
        gate_a.open()
        done_a = wait_job(alice, a, timeout=60.0)
        assert (done_a["state"], done_a["retries"]) == ("SUCCEEDED", 0)
        assert broker.call(lambda: broker.embedded.broker.core.reclaimed) == 1
    gate_a.close()
    gate_b.close()


@pytest.mark.parametrize(
    ("data", "field"),
    [([2], "capacity"), ({"H200": -1}, "capacity.H200"), ({"H200": 1.5}, "capacity.H200"),
     ({"H200": True}, "capacity.H200")],
)
def test_a_bad_reading_is_a_typed_error_naming_the_key(data: object, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_reading(data, "test")
    assert err.value.field == field


def test_unreadable_files_and_unknown_sources_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="capacity file"):
        asyncio.run(FileCapacitySource(tmp_path / "missing.json").read())
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        asyncio.run(FileCapacitySource(tmp_path / "bad.json").read())
    with pytest.raises(ConfigError) as err:
        open_capacity_source("ftp://controller")
    assert err.value.field == "capacity_source"
    (tmp_path / "ok.json").write_text('{"H200": 3}')
    source = open_capacity_source(f"file:{tmp_path / 'ok.json'}")
    assert asyncio.run(source.read()) == {"H200": 3}


def test_an_http_source_reads_a_controller_and_refuses_a_bad_answer() -> None:
    answers = {"body": b'{"H200": 2}', "status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(int(answers["status"]))  # type: ignore[call-overload]
            body = answers["body"]
            assert isinstance(body, bytes)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = open_capacity_source(f"http://127.0.0.1:{server.server_address[1]}/")
        assert asyncio.run(source.read()) == {"H200": 2}
        answers["body"] = b"[]"
        with pytest.raises(ConfigError, match="expected an object"):
            asyncio.run(source.read())
        answers["status"] = 500
        with pytest.raises(ConfigError, match="answered 500"):
            asyncio.run(source.read())
    finally:
        server.shutdown()
        server.server_close()


def test_a_reclaim_read_back_after_a_restart_still_uses_no_failure_retry(tmp_path: Path) -> None:
    """The retry decision after a restart comes from what the store holds: a job reclaimed
    once, re-read by a new process, has used none of its one failure retry."""
    store = open_store(data_dir=tmp_path)
    try:
        job = store.submit("alice", JobSpec(pool="gpu", command=["x"], max_retries=1),
                           now=0.0).job
        job = store.start(job, [PodBinding(0, "gpu-1", AcquisitionPath.NEW, "none")],
                          now=1.0)
        store.requeue(job, now=2.0, error_class=JobErrorClass.RECLAIMED)
    finally:
        store.close()
    reopened = open_store(data_dir=tmp_path)  # the restarted broker's store
    try:
        read = reopened.get(job.id)
        assert read is not None
        ticket = ticket_of(read)
    finally:
        reopened.close()
    assert (ticket.retries, ticket.reclaims, ticket.failures) == (1, 1, 0)
    failed = AttemptEnd(exit_code=3)
    assert judge(failed, ticket.failures, ticket.spec.max_retries).retry
    assert not judge(failed, ticket.retries, ticket.spec.max_retries).retry  # the old count

"""Invariant 8: after a broker crash (SIGKILL) and restart, no job is lost or launched twice.

A real `firepool serve` process is killed while one job runs on a held pod's neighbour and
another waits in the queue; a second server on the same data directory re-attaches the
running attempt (same attempt id, no retry), keeps the owner's held pod, and runs the queued
job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from firepool.testing.service import TERMINAL, wait_pod

CATALOG = """
[[pools]]
name = "cpu"
network = "host"  # its jobs report to the test over the host's loopback
min_count = 2
max_count = 3
idle_timeout = 300.0
"""


def start_server(
    data_dir: Path, catalog: Path, store_url: str | None = None
) -> subprocess.Popen[bytes]:
    (data_dir / "url").unlink(missing_ok=True)
    store = ["--store", store_url] if store_url else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "firepool.cli.main", "serve", "--data-dir", str(data_dir),
         "--port", "0", "--catalog", str(catalog), *store],
        stdout=subprocess.DEVNULL,
        stderr=open(data_dir / "serve.log", "ab"),  # noqa: SIM115
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (data_dir / "url").exists():
        assert proc.poll() is None, (data_dir / "serve.log").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def client(data_dir: Path, token: str | None = None) -> httpx.Client:
    url = (data_dir / "url").read_text().strip()
    token = token or (data_dir / "token").read_text().strip()
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def wait_state(c: httpx.Client, job_id: str, states: set[str], timeout: float = 60) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while True:
        job = c.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in states:
            return job  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def counting_server(runs: list[str]) -> ThreadingHTTPServer:
    """A loopback server that records each request path (one per launch of the job)."""

    class Count(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            runs.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Count)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_sigkill_and_restart_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    catalog = tmp_path / "pools.toml"
    catalog.write_text(CATALOG)
    runs: list[str] = []  # a job cannot leave files on the host: it calls home instead
    counter = counting_server(runs)
    url = f"http://127.0.0.1:{counter.server_address[1]}/run"
    body = (f"import time, urllib.request; urllib.request.urlopen({url!r}); time.sleep(4); "
            "print('done')")
    server = start_server(data, catalog)
    try:
        bob_token = subprocess.run(
            [sys.executable, "-m", "firepool.cli.main", "token", "create", "bob", "--data-dir",
             str(data)],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        with client(data) as c, client(data, bob_token) as bob:
            first = c.post("/v1/jobs", json={"pool": "cpu", "command": ["true"], "lease_tag": "a"})
            held = wait_state(c, first.json()["id"], TERMINAL)["pods"][0]["name"]
            long = bob.post(
                "/v1/jobs",
                json={"pool": "cpu", "command": ["python", "-c", body], "lease_tag": "b"},
            ).json()["id"]
            running = wait_state(bob, long, {"RUNNING"})
            hold_until = wait_pod(c, held)["hold_until"]  # held once its reset is over
            assert hold_until is not None
            assert running["pods"][0]["name"] != held
            deadline = time.monotonic() + 30
            while bob.get(f"/v1/jobs/{long}").json()["timings"]["started"] is None:
                assert time.monotonic() < deadline  # wait until the attempt's process runs
                time.sleep(0.05)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)

        server = start_server(data, catalog)
        with client(data) as c, client(data, bob_token) as bob:
            done = wait_state(bob, long, TERMINAL, timeout=60)
            assert (done["state"], done["retries"], done["attempt"]) == (
                "SUCCEEDED", 0, running["attempt"],
            )  # fmt: skip
            assert runs == ["/run"]  # launched exactly once
            pods = {p["name"]: p for p in c.get("/v1/pods").json()["pods"]}
            assert pods[held]["state"] == "held" and pods[held]["owner"] == "local"
            assert pods[held]["hold_until"] == hold_until  # its expiry, to the bit
            again = c.post("/v1/jobs", json={"pool": "cpu", "command": ["true"], "lease_tag": "a"})
            final = wait_state(c, again.json()["id"], TERMINAL)
            assert (final["state"], final["pods"][0]["name"]) == ("SUCCEEDED", held)
            assert final["pods"][0]["acquisition"] == "warm"
            metrics = c.get("/metrics").text  # what the restart did, as an operator sees it
            assert 'firepool_recovery_events_total{event="attempt_reattached"} 1.0' in metrics
            assert 'firepool_recovery_events_total{event="pod_restored"}' in metrics
    finally:
        counter.shutdown()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)


_CLEANUP = """
import asyncio, sys
from firepool.backends.local import LocalBackend
async def main():
    backend = LocalBackend(sys.argv[1] + "/pods")
    for pod in await backend.list_pods():
        await backend.delete(pod.name)
asyncio.run(main())
"""


ONE = """
[[pools]]
name = "one"
network = "host"  # its jobs report to the test over the host's loopback
min_count = 1
max_count = 1
idle_timeout = 300.0
"""


def test_a_queued_job_survives_the_kill_and_runs_once(tmp_path: Path) -> None:
    """The pool's one pod runs a job that waits for the test's word; a second job waits in the
    queue behind it. After SIGKILL and restart, the first is re-attached and finishes, the
    queued one then runs: each exactly once, both SUCCEEDED without a retry."""
    from test_recovery_output_across_crash import Home

    data = tmp_path / "data"
    data.mkdir()
    catalog = tmp_path / "pools.toml"
    catalog.write_text(ONE)
    home = Home()
    body = ("import os, sys, time, urllib.request; base = sys.argv[1]; "
            "a = os.environ['FIREPOOL_ATTEMPT']; urllib.request.urlopen(f'{base}/printed/' + a)\n"
            "while urllib.request.urlopen(base + '/go/finish').status != 200: time.sleep(0.02)")
    server = start_server(data, catalog)
    try:
        with client(data) as c:
            first = c.post("/v1/jobs", json={"pool": "one", "command": ["python", "-c", body,
                                                                      home.url]}).json()["id"]
            home.wait_printed(f"{first}:0", 1)
            queued = c.post("/v1/jobs", json={"pool": "one", "command": ["python", "-c", body,
                                                                       home.url]}).json()["id"]
            assert c.get(f"/v1/jobs/{queued}").json()["state"] == "QUEUED"
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        server = start_server(data, catalog)
        home.allow("finish")
        with client(data) as c:
            for job_id in (first, queued):
                done = wait_state(c, job_id, TERMINAL, timeout=120)
                assert (done["state"], done["retries"]) == ("SUCCEEDED", 0), done
        assert dict(home.printed) == {f"{first}:0": 1, f"{queued}:0": 1}  # each ran once
    finally:
        home.server.shutdown()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)

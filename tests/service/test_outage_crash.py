"""The broker killed while a finished job's verdict waits for a stopped store: the job runs once.

The job exits during a PostgreSQL outage; the broker resets its pod and keeps the verdict in
memory until the store is back, then is SIGKILLed before that. The pod's agent still answers
for the exited attempt after its reset, so the restarted broker finalizes the job from that
record instead of declaring the attempt lost and running the job a second time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_recovery_crash import _CLEANUP, client, start_server, wait_state
from test_recovery_output_across_crash import Home, read_all

from firepool.testing.databases import start_private_server
from firepool.testing.private_db import PrivateServer
from firepool.testing.service import TERMINAL

ONE = """
[[pools]]
name = "one"
network = "host"  # its jobs report to the test over the host's loopback
min_count = 1
max_count = 1
idle_timeout = 300.0
"""


@pytest.fixture(scope="module")
def postgres() -> Iterator[PrivateServer]:
    private = start_private_server("postgresql")
    try:
        yield private
    finally:
        private.close()


def test_a_verdict_waiting_for_the_store_survives_a_broker_kill(
    postgres: PrivateServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    catalog = tmp_path / "pools.toml"
    catalog.write_text(ONE)
    store_url = postgres.create_database()
    home = Home()
    body = ("import os, sys, time, urllib.request; base = sys.argv[1]; print('first', flush=True)\n"
            "urllib.request.urlopen(base + '/printed/' + os.environ['FIREPOOL_ATTEMPT'])\n"
            "while urllib.request.urlopen(base + '/go/finish').status != 200: time.sleep(0.02)\n"
            "print('last', flush=True)")
    server = start_server(data, catalog, store_url)
    try:
        with client(data) as c:
            job = c.post("/v1/jobs", json={"pool": "one", "command": ["python", "-c", body,
                                                                    home.url]}).json()["id"]
            home.wait_printed(f"{job}:0", 1)
        postgres.stop()
        home.allow("finish")
        deadline = time.monotonic() + 60
        # The verdict is decided only after the pod's reset: once it waits for the store, the
        # agent has wiped the attempt away.
        while "keeping the verdict" not in (data / "serve.log").read_text():
            assert time.monotonic() < deadline, (data / "serve.log").read_text()[-2000:]
            time.sleep(0.05)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        postgres.start()
        server = start_server(data, catalog, store_url)
        with client(data) as c:
            done = wait_state(c, job, TERMINAL, timeout=120)
            assert (done["state"], done["retries"], done["exit_code"]) == ("SUCCEEDED", 0, 0), done
            assert dict(home.printed) == {f"{job}:0": 1}  # ran once, never retried
            assert read_all(c, job, 0) == "first\nlast\n"
    finally:
        home.server.shutdown()
        if not postgres.running:
            postgres.start()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)

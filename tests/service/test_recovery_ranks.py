"""Restart recovery probes every rank of a multi-pod attempt (issue 13, item 1), on real
processes: a real `firepool serve` is SIGKILLed while a two-pod job runs, something happens
to the job's pods while no broker runs, and a second server on the same data directory
recovers.

- Both ranks finish during the outage: the attempt is finalised from the agents' records
  (SUCCEEDED, same attempt id, no retry) and its output is complete.
- Rank 1's agent no longer knows the attempt (its pod was reset during the outage): the
  attempt cannot be confirmed whole, so it is lost, never re-attached (before, rank 0 alone
  was probed and the job waited on rank 1 for good), and retried under a new attempt id.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_recovery_crash import _CLEANUP, client, start_server, wait_state
from test_recovery_output_across_crash import Home, read_all

from firepool.backends.local import LocalBackend
from firepool.experiment.fault_targets import lost_in_restart
from firepool.protocol import AttemptStatus
from firepool.testing.service import TERMINAL

pytestmark = pytest.mark.timeout(300)

CATALOG = """
[[pools]]
name = "cpu"
network = "host"  # the gang's ranks rendezvous over TCP
min_count = 2
max_count = 4
idle_timeout = 300.0
"""

JOB = """
import os, sys, time, urllib.request
rank, base = os.environ["RANK"], sys.argv[1]
def call(path):
    return urllib.request.urlopen(f"{base}/{path}?rank={rank}").status
call("printed/up")
while call("go/down") != 200:
    time.sleep(0.02)
print(f"r{rank} finished", flush=True)
"""


def agent_call(data: Path, pod: str, what: str, attempt: str) -> AttemptStatus | None:
    """Ask (or reset) a pod's agent directly, as only its broker could."""

    async def go() -> AttemptStatus | None:
        backend = LocalBackend(str(data / "pods"))
        (record,) = [r for r in await backend.list_pods() if r.name == pod]
        async with backend.agent(record) as agent:
            if what == "reset":
                await agent.reset()
                return None
            return await agent.status(attempt)

    return asyncio.run(go())


def start_two_rank_job(data: Path, home: Home) -> tuple[subprocess.Popen[bytes], dict]:  # type: ignore[type-arg]
    catalog = data.parent / "pools.toml"
    catalog.write_text(CATALOG)
    server = start_server(data, catalog)
    with client(data) as c:
        job_id = c.post(
            "/v1/jobs",
            json={"pool": "cpu", "pods": 2, "topology": "torchrun", "max_retries": 1,
                  "command": ["python", "-c", JOB, home.url]},
        ).json()["id"]  # fmt: skip
        home.wait_printed("up", 2)
        job = wait_state(c, job_id, {"RUNNING"})
    os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=10)
    return server, job


def finish(server: subprocess.Popen[bytes], data: Path, home: Home) -> None:
    home.server.shutdown()
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)
    subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)


def test_an_attempt_every_rank_finished_during_the_outage_is_finalised_from_the_agents(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    home = Home()
    server, job = start_two_rank_job(data, home)
    try:
        home.allow("down")
        pods = [p["name"] for p in job["pods"]]
        deadline = time.monotonic() + 60
        while not all(
            (s := agent_call(data, pod, "status", job["attempt"])) is not None
            and s.exit is not None
            for pod in pods
        ):
            assert time.monotonic() < deadline  # both ranks exit while no broker runs
            time.sleep(0.05)
        server = start_server(data, data.parent / "pools.toml")
        with client(data) as c:
            done = wait_state(c, job["id"], TERMINAL, timeout=60)
            assert (done["state"], done["retries"], done["attempt"]) == (
                "SUCCEEDED", 0, job["attempt"],
            )  # fmt: skip
            assert [read_all(c, job["id"], r) for r in (0, 1)] == ["r0 finished\n", "r1 finished\n"]
    finally:
        finish(server, data, home)


def test_an_attempt_a_rank_no_longer_knows_is_lost_and_retried_not_reattached(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    home = Home()
    server, job = start_two_rank_job(data, home)
    try:
        rank1 = job["pods"][1]["name"]
        agent_call(data, rank1, "reset", job["attempt"])  # kills rank 1, forgets the attempt
        server = start_server(data, data.parent / "pools.toml")
        home.allow("down")  # the retry runs straight through
        with client(data) as c:
            done = wait_state(c, job["id"], TERMINAL, timeout=120)
            assert (done["state"], done["retries"]) == ("SUCCEEDED", 1), done
            assert done["attempt"] != job["attempt"]
            old = {p["name"] for p in job["pods"]}
            deadline = time.monotonic() + 60
            while old & {p["name"] for p in c.get("/v1/pods").json()["pods"]}:
                assert time.monotonic() < deadline  # the old pods are retired, then deleted
                time.sleep(0.05)
            assert read_all(c, job["id"], 1) == "r1 finished\n"
        # The restarted broker names the lost attempt's caller and pods in its log.
        lost = lost_in_restart(data / "serve.log")
        assert set(lost) == old and len(set(lost.values())) == 1, lost
    finally:
        finish(server, data, home)

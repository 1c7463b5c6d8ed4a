"""Agent partition (issue 13, item 4), on real processes: the agent of a running attempt is
SIGSTOPped (alive, but silent) past the broker's liveness window. The attempt is declared
PodLost and re-queued under a new attempt id on another pod; after SIGCONT nothing of the old
attempt runs, and the job's result is the new attempt's."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from firepool.agent import procfs
from firepool.testing.service import BrokerThread, submit, wait_job

pytestmark = pytest.mark.timeout(300)

JOB = """
import os, sys, time, urllib.parse, urllib.request
attempt = os.environ["FIREPOOL_ATTEMPT"]
ns = urllib.parse.quote(os.readlink("/proc/self/ns/pid"))  # private pods: a PID ns of their own
urllib.request.urlopen(f"{sys.argv[1]}/run?attempt={attempt}&pid={os.getpid()}&ns={ns}")
if attempt.endswith(":0"):
    time.sleep(600)  # the first attempt would run for good
"""


def phone_home(
    runs: dict[str, int], seen: threading.Condition
) -> tuple[ThreadingHTTPServer, str]:
    """A loopback server where each attempt of `JOB` reports its pid, translated into this
    /proc's numbering (a private pod's job knows itself by its PID namespace's pid)."""

    class Home(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            q = parse_qs(urlsplit(self.path).query)
            with seen:
                pid = procfs.known_here_as(q["ns"][0], int(q["pid"][0]))
                assert pid is not None, f"no process is {q}"
                runs[q["attempt"][0]] = pid
                seen.notify_all()
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    home = ThreadingHTTPServer(("127.0.0.1", 0), Home)
    threading.Thread(target=home.serve_forever, daemon=True).start()
    return home, f"http://127.0.0.1:{home.server_address[1]}"


def test_a_partitioned_agent_loses_its_attempt_and_the_old_attempt_never_comes_back(
    broker: BrokerThread,
) -> None:
    runs: dict[str, int] = {}
    seen = threading.Condition()
    home, url = phone_home(runs, seen)
    stopped = 0
    try:
        with broker.client() as c:
            job_id = submit(
                c, pool="loopback", command=[sys.executable, "-c", JOB, url], max_retries=1
            )
            with seen:
                assert seen.wait_for(lambda: len(runs) == 1, 60)
            first = c.get(f"/v1/jobs/{job_id}").json()
            pod = first["pods"][0]["name"]
            stopped = broker.call(lambda: broker.embedded.broker.pods.records[pod].pid)
            os.kill(stopped, signal.SIGSTOP)  # the agent is alive but answers nothing
            done = wait_job(c, job_id, timeout=180)
            assert (done["state"], done["retries"]) == ("SUCCEEDED", 1), done
            assert done["attempt"] == f"{job_id}:1" and done["pods"][0]["name"] != pod
            attempts = broker.call(lambda: broker.embedded.store.attempts(job_id))
            assert attempts[0].error_class is not None
            assert attempts[0].error_class.value == "PodLost"
            lost_log = c.get(f"/v1/jobs/{job_id}/logs", params={"attempt": 0}).json()["data"]
            assert f"[firepool: output may be incomplete: pod {pod} stopped answering]" in lost_log
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
        old = runs[f"{job_id}:0"]
        deadline = time.monotonic() + 60
        while procfs.alive(old):
            assert time.monotonic() < deadline, "the old attempt still runs"
            time.sleep(0.05)
        assert sorted(runs) == [f"{job_id}:0", f"{job_id}:1"]  # each attempt launched once
        with broker.client() as c:
            final = c.get(f"/v1/jobs/{job_id}").json()
            assert (final["state"], final["retries"]) == ("SUCCEEDED", 1)  # unchanged
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        home.shutdown()


PARTITION_POOL = """
[[pools]]
name = "cpu"
network = "host"  # its jobs report to the test over the host's loopback
min_count = 1
max_count = 2
idle_timeout = 30.0
"""


def test_a_partitioned_agent_found_at_recovery_is_not_run_twice(tmp_path: Path) -> None:
    """The broker restarts while a running attempt's agent is SIGSTOPped. Recovery cannot
    reach it; the attempt is re-attached rather than retried at once, and declared lost only
    after the agent's fence window, so the retry never runs beside a live first attempt."""
    from test_recovery_crash import _CLEANUP, client, start_server, wait_state

    from firepool.experiment.fault_targets import agent_pid

    data = tmp_path / "data"
    data.mkdir()
    catalog = tmp_path / "pools.toml"
    catalog.write_text(PARTITION_POOL)
    runs: dict[str, int] = {}
    seen = threading.Condition()
    home, url = phone_home(runs, seen)
    server = start_server(data, catalog)
    stopped = None
    try:
        with client(data) as c:
            job_id = c.post("/v1/jobs", json={"pool": "cpu", "max_retries": 1,
                                              "command": [sys.executable, "-c", JOB, url]}
                            ).json()["id"]  # fmt: skip
            with seen:
                assert seen.wait_for(lambda: len(runs) == 1, 60)
            pod = c.get(f"/v1/jobs/{job_id}").json()["pods"][0]["name"]
        stopped = agent_pid(data, pod)
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        restarted = time.monotonic()
        server = start_server(data, catalog)
        with client(data) as c:
            job = c.get(f"/v1/jobs/{job_id}").json()
            assert (job["state"], job["attempt"]) == ("RUNNING", f"{job_id}:0")  # not retried
            done = wait_state(c, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=180)
            assert (done["state"], done["retries"]) == ("SUCCEEDED", 1), done
            assert time.monotonic() - restarted >= 30  # the agent's fence came first
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
        deadline = time.monotonic() + 60
        while procfs.alive(runs[f"{job_id}:0"]):
            assert time.monotonic() < deadline, "the first attempt still runs"
            time.sleep(0.05)
        assert sorted(runs) == [f"{job_id}:0", f"{job_id}:1"]  # each attempt launched once
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        home.shutdown()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)

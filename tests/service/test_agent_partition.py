"""Agent partition (issue 13, item 4), on real processes: the agent of a running attempt is
SIGSTOPped (alive, but silent) past the broker's liveness window. The attempt is declared
PodLost and re-queued under a new attempt id on another pod; after SIGCONT nothing of the old
attempt runs, and the job's result is the new attempt's."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


def test_a_partitioned_agent_loses_its_attempt_and_the_old_attempt_never_comes_back(
    broker: BrokerThread,
) -> None:
    runs: dict[str, int] = {}
    seen = threading.Condition()

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
    url = f"http://127.0.0.1:{home.server_address[1]}"
    stopped = 0
    try:
        with broker.client() as c:
            job_id = submit(c, command=[sys.executable, "-c", JOB, url], max_retries=1)
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

"""No output is lost across a broker crash (issue 13, item 0), on real processes.

A two-pod job prints numbered lines to stdout and stderr on both ranks in three phases: while
the first `firepool serve` runs, while no broker runs (after a real SIGKILL of its process
group), and after a second server on the same data directory re-attached the attempt. The job
calls home between phases (it cannot leave files on the host), so each phase starts only when
the test says. Every line of every rank and stream is stored exactly once, in order, and
`firepool logs --rank N` shows it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from test_recovery_crash import _CLEANUP, client, start_server, wait_state

from firepool.testing.service import TERMINAL

pytestmark = pytest.mark.timeout(300)

CATALOG = """
[[pools]]
name = "cpu"
network = "host"  # the gang's ranks rendezvous over TCP
min_count = 2
max_count = 3
idle_timeout = 300.0
"""
LINES = 40  # per phase, rank and stream

JOB = """
import os, sys, time, urllib.request
rank, base = os.environ["RANK"], sys.argv[1]
def call(path):
    return urllib.request.urlopen(f"{base}/{path}?rank={rank}").status
for phase in ("up", "down", "back"):
    while call(f"go/{phase}") != 200:
        time.sleep(0.02)
    for i in range(LINES):
        print(f"r{rank} {phase} out {i}", flush=True)
        print(f"r{rank} {phase} err {i}", file=sys.stderr, flush=True)
    call(f"printed/{phase}")
""".replace("LINES", str(LINES))


class Home:
    """The job's phone: which phases may start, and which each rank has printed."""

    def __init__(self) -> None:
        self.allowed: set[str] = {"up"}
        self.printed: Counter[str] = Counter()
        self.cond = threading.Condition()
        home = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                kind, _, phase = url.path.strip("/").partition("/")
                with home.cond:
                    if kind == "printed":
                        home.printed[phase] += 1
                        home.cond.notify_all()
                    ok = kind == "printed" or phase in home.allowed
                self.send_response(200 if ok else 204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def allow(self, phase: str) -> None:
        with self.cond:
            self.allowed.add(phase)

    def wait_printed(self, phase: str, ranks: int, timeout: float = 60) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.printed[phase] >= ranks, timeout), phase


def read_all(c: httpx.Client, job_id: str, rank: int) -> str:
    out, offset = "", 0
    while True:
        page = c.get(f"/v1/jobs/{job_id}/logs", params={"offset": offset, "rank": rank}).json()
        out += page["data"]
        offset = page["next_offset"]
        if offset >= page["size"]:
            return out


def test_every_line_of_every_rank_survives_a_broker_sigkill_exactly_once(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    catalog = tmp_path / "pools.toml"
    catalog.write_text(CATALOG)
    home = Home()
    server = start_server(data, catalog)
    try:
        with client(data) as c:
            job = c.post(
                "/v1/jobs",
                json={"pool": "cpu", "pods": 2, "topology": "torchrun",
                      "command": ["python", "-c", JOB, home.url]},
            ).json()["id"]  # fmt: skip
            home.wait_printed("up", 2)
            # the first broker stored (part of) the first phase before it dies
            deadline = time.monotonic() + 60
            while "r1 up out 0" not in read_all(c, job, 1) or "r0 up out 0" not in read_all(
                c, job, 0
            ):
                assert time.monotonic() < deadline  # polled like wait_state
                time.sleep(0.05)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        home.allow("down")
        home.wait_printed("down", 2)  # printed while no broker runs

        server = start_server(data, catalog)
        home.allow("back")
        with client(data) as c:
            done = wait_state(c, job, TERMINAL, timeout=120)
            assert (done["state"], done["retries"]) == ("SUCCEEDED", 0), done
            for rank in (0, 1):
                text = read_all(c, job, rank)
                lines = Counter(text.splitlines())
                for phase in ("up", "down", "back"):
                    for stream in ("out", "err"):
                        expected = [f"r{rank} {phase} {stream} {i}" for i in range(LINES)]
                        assert [lines[e] for e in expected] == [1] * LINES, (rank, phase, text)
                        # each stream's lines in the order printed
                        mine = [ln for ln in text.splitlines() if ln.startswith(
                            f"r{rank} ") and f" {stream} " in ln]  # fmt: skip
                        assert mine == [
                            f"r{rank} {p} {stream} {i}"
                            for p in ("up", "down", "back") for i in range(LINES)
                        ]  # fmt: skip
                assert "firepool:" not in text  # no loss was recorded
                assert sum(lines.values()) == 3 * 2 * LINES
        cli = subprocess.run(
            [sys.executable, "-m", "firepool.cli.main", "logs", job, "--rank", "1",
             "--url", (data / "url").read_text().strip(),
             "--token", (data / "token").read_text().strip()],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert cli.stdout.count("r1 back err 39\n") == 1 and "r0 " not in cli.stdout
    finally:
        home.server.shutdown()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)

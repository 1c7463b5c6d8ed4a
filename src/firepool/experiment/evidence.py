"""What the jobs of a fault campaign leave behind, outside the broker: a loopback HTTP server
the campaign owns, which every job body calls when it starts and when it ends its work.

The broker's own records cannot prove that it ran nothing twice (a broker that lost track of
an attempt would not know it ran), so the campaign counts launches and completions from these
calls alone. A job's body is `JOB_BODY`; its markers are keyed by attempt id
(`<job>:<retry>`, the agent's FIREPOOL_ATTEMPT).
"""

from __future__ import annotations

import collections
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

#: argv: home URL, work seconds for the attempt ":0", work seconds for any retry. Prints a
#: begin and an end line naming the attempt (its output, checked in the job's log), and calls
#: home before and after its work (retrying: the campaign's server is always up).
JOB_BODY = """
import os, sys, time, urllib.request
home, first, later = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
attempt = os.environ["FIREPOOL_ATTEMPT"]
def mark(kind):
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{home}/{kind}?attempt={attempt}", timeout=5).close()
            return
        except OSError:
            time.sleep(0.1)
mark("start")
print("begin", attempt, flush=True)
time.sleep(first if attempt.endswith(":0") else later)
print("end", attempt, flush=True)
mark("end")
"""


def expected_output(attempt: str) -> str:
    return f"begin {attempt}\nend {attempt}\n"


class Evidence:
    """Counts of `start` and `end` calls per attempt id."""

    def __init__(self) -> None:
        self.starts: collections.Counter[str] = collections.Counter()
        self.ends: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        evidence = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                attempt = parse_qs(url.query).get("attempt", [""])[0]
                with evidence._lock:
                    if url.path == "/start":
                        evidence.starts[attempt] += 1
                    elif url.path == "/end":
                        evidence.ends[attempt] += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of_job(self, job_id: str) -> tuple[dict[str, int], dict[str, int]]:
        """(starts, ends) per attempt of one job."""
        prefix = f"{job_id}:"
        with self._lock:
            starts = {a: n for a, n in self.starts.items() if a.startswith(prefix)}
            ends = {a: n for a, n in self.ends.items() if a.startswith(prefix)}
        return starts, ends

    def ran_twice(self, job_id: str) -> bool:
        """The job's work was done more than once for its one submission: two attempts both
        completed it, or one attempt id was launched twice."""
        starts, ends = self.of_job(job_id)
        return sum(ends.values()) > 1 or any(n > 1 for n in starts.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

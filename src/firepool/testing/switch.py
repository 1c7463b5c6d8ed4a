"""A loopback switch a job polls until it is opened: how tests and benchmarks hold a job
running for exactly as long as they need (a job sees no host files). A job reaches it only
from a pod on the host's network: its pool says `network = "host"` (a pod's own network
namespace has nothing but its own loopback)."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Switch:
    def __init__(self) -> None:
        state = self.state = {"open": False}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"go" if state["open"] else b"wait"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def open(self) -> None:
        self.state["open"] = True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_code(self, then: str = "") -> str:
        """Python statements that block until the switch opens, then run `then`."""
        return (
            "import time, urllib.request\n"
            f"while urllib.request.urlopen({self.url!r}).read() != b'go': time.sleep(0.01)\n" + then
        )

    def job(self, then: str = "", *, first_attempt_only: bool = False) -> list[str]:
        """A command that waits for the switch, then runs `then`; with `first_attempt_only`,
        a retry of the job exits 0 at once (the attempt a test holds is the first one)."""
        skip = (
            (
                "import os\nif not os.environ['FIREPOOL_ATTEMPT'].endswith(':0'): raise "
                "SystemExit(0)\n"
            )
            if first_attempt_only
            else ""
        )
        return [sys.executable, "-c", skip + self.wait_code(then)]

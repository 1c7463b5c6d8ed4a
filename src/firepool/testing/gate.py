"""A loopback switch that real jobs poll: a job sees no host files, but it can reach
127.0.0.1, so a test decides exactly when a running job may end."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Gate:
    """Closed until `open()`; `job()` is a command that exits 0 once the gate opens."""

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

    def job(self, *, first_attempt_only: bool = False) -> list[str]:
        """Wait for the gate; with `first_attempt_only`, a retry exits 0 at once."""
        skip = ("import os\nif not os.environ['FIREPOOL_ATTEMPT'].endswith(':0'): raise "
                "SystemExit(0)\n") if first_attempt_only else ""
        return [sys.executable, "-c",
                skip + "import time, urllib.request\n"
                f"while urllib.request.urlopen({self.url!r}).read() != b'go': time.sleep(0.05)"]

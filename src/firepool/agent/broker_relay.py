"""The one way out of a pod with no network: its jobs' progress reports, relayed to the broker.

An elastic job reports progress to the broker (`client.report_progress`), but a pod with a
network namespace of its own reaches nothing over TCP, the broker included. The agent, on the
host's side, listens on a unix socket in the pod's directory and forwards exactly one route,
`POST /v1/jobs/<id>/progress`, to the broker URL the broker gave the current attempt; the job's
`FIREPOOL_URL` names the socket (`unix:<path>`), which the SDK understands. The job's own
progress token travels unchanged and the broker checks it as before, so the relay grants
nothing a job could not do on the host's network, and every other path, method or oversized
body is refused here.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import socketserver
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from firepool.protocol import UNIX_URL_PREFIX

log = logging.getLogger("firepool.agent")

#: What a job may send through the relay.
ROUTE = re.compile(r"^/v1/jobs/[A-Za-z0-9_.-]{1,128}/progress$")
MAX_BODY = 64 << 10
UPSTREAM_TIMEOUT_S = 5.0


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    upstream: str | None = None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a unix peer has no address to log, and the broker logs the report

    def address_string(self) -> str:
        return "job"

    def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, status: int, message: str) -> None:
        body = json.dumps({"error": "RelayRefused", "message": message, "field": None}).encode()
        self._answer(status, body)

    def do_GET(self) -> None:
        self._refuse(404, "only progress reports leave this pod")

    do_PUT = do_DELETE = do_PATCH = do_GET

    def do_POST(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if not ROUTE.match(path) or "?" in self.path:
            self._refuse(404, "only progress reports leave this pod")
            return
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._refuse(413, f"a progress report is at most {MAX_BODY} bytes")
            return
        body = self.rfile.read(length)
        upstream = self.server.upstream
        if upstream is None:
            self._refuse(503, "no attempt of this pod reports progress now")
            return
        try:
            status, answer, kind = _forward(upstream, path, body, self.headers)
        except OSError as exc:
            self._refuse(503, f"the broker cannot be reached: {type(exc).__name__}")
            return
        self._answer(status, answer, kind)


def _forward(upstream: str, path: str, body: bytes, headers: Any) -> tuple[int, bytes, str]:
    parts = urllib.parse.urlsplit(upstream)
    conn_type = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    conn = conn_type(parts.hostname or "127.0.0.1", parts.port, timeout=UPSTREAM_TIMEOUT_S)
    try:
        send = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        if headers.get("Authorization"):
            send["Authorization"] = headers["Authorization"]
        conn.request("POST", parts.path.rstrip("/") + path, body=body, headers=send)
        response = conn.getresponse()
        return response.status, response.read(), response.getheader("Content-Type") or ""
    finally:
        conn.close()


class BrokerRelay:
    """The relay of one pod: `url` is what its jobs get as FIREPOOL_URL."""

    def __init__(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self.path = path
        self._server = _Server(str(path), _Handler)
        os.chmod(path, 0o666)  # the job's uid connects; the pod directory is its only way in
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="broker-relay", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return UNIX_URL_PREFIX + str(self.path)

    def relay_for(self, upstream: str | None) -> None:
        """Where the current attempt's reports go (None: refused until the next launch)."""
        self._server.upstream = upstream

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)

"""Push exit events to the broker: never only polled.

One background thread posts each event to the callback URL given at pod creation, with the
pod secret as bearer token, over one kept-alive connection (a new connection per event cost
the broker an accept and a fresh HTTP parser per job), retrying with capped exponential
back-off for up to `give_up_s` (the broker may be restarting). Events are also kept by the
agent, so a broker that missed one still finds the exit through `GET /v1/attempts/{attempt}`
during recovery.
"""

from __future__ import annotations

import http.client
import logging
import queue
import threading
import time
import urllib.parse

from firepool.protocol import ExitEvent

log = logging.getLogger("firepool.agent")


class EventPusher:
    def __init__(self, url: str | None, secret: str, give_up_s: float = 600.0) -> None:
        self.url = url
        self.secret = secret
        self.give_up_s = give_up_s
        self._queue: queue.Queue[ExitEvent | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._conn: http.client.HTTPConnection | None = None  # the pusher thread's only
        if url:
            self._thread = threading.Thread(target=self._run, name="event-pusher", daemon=True)
            self._thread.start()

    def push(self, event: ExitEvent) -> None:
        if self.url:
            self._queue.put(event)

    def _connection(self) -> http.client.HTTPConnection:
        """The kept-alive connection to the broker, opened on first use or after a failure."""
        if self._conn is None:
            assert self.url is not None
            target = urllib.parse.urlsplit(self.url)
            kind = (
                http.client.HTTPSConnection
                if target.scheme == "https"
                else http.client.HTTPConnection
            )
            self._conn = kind(target.hostname or "127.0.0.1", target.port, timeout=10)
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _post(self, body: bytes) -> bool:
        assert self.url is not None
        target = urllib.parse.urlsplit(self.url)
        path = target.path or "/"
        if target.query:
            path += "?" + target.query
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.secret}"}
        # A kept-alive connection the broker closed while idle fails on first use: that one
        # failure is retried at once on a fresh connection, not counted as a delivery failure.
        for fresh in (self._conn is None, True):
            try:
                conn = self._connection()
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                status = resp.status
                if resp.will_close:
                    self._drop()
            except (http.client.HTTPException, OSError) as exc:
                self._drop()
                if fresh:
                    log.warning("exit event not delivered yet: %s", exc)
                    return False
                continue
            if 200 <= status < 300:
                return True
            log.warning("exit event refused: HTTP %s", status)
            return 400 <= status < 500 and status not in (408, 429)  # do not retry a 4xx
        return False

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            body = event.model_dump_json().encode()
            deadline = time.monotonic() + self.give_up_s
            pause = 0.05
            while not self._post(body):
                if time.monotonic() > deadline:
                    log.error("giving up on exit event for %s", event.attempt)
                    break
                time.sleep(pause)
                pause = min(pause * 2, 5.0)

    def close(self, timeout: float = 1.0) -> None:
        """Stop after the events already pushed, waiting at most `timeout` for them."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=timeout)

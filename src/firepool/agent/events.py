"""Push exit events to the broker: never only polled.

One background thread posts each event to the callback URL given at pod creation, with the
pod secret as bearer token, retrying with capped exponential back-off for up to `give_up_s`
(the broker may be restarting). Events are also kept by the agent, so a broker that missed
one still finds the exit through `GET /v1/attempts/{attempt}` during recovery.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import urllib.error
import urllib.request

from firepool.protocol import ExitEvent

log = logging.getLogger("firepool.agent")


class EventPusher:
    def __init__(self, url: str | None, secret: str, give_up_s: float = 600.0) -> None:
        self.url = url
        self.secret = secret
        self.give_up_s = give_up_s
        self._queue: queue.Queue[ExitEvent | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if url:
            self._thread = threading.Thread(target=self._run, name="event-pusher", daemon=True)
            self._thread.start()

    def push(self, event: ExitEvent) -> None:
        if self.url:
            self._queue.put(event)

    def _post(self, body: bytes) -> bool:
        assert self.url is not None
        req = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.secret}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return bool(200 <= resp.status < 300)
        except urllib.error.HTTPError as exc:
            log.warning("exit event refused: HTTP %s", exc.code)
            return 400 <= exc.code < 500 and exc.code not in (408, 429)  # do not retry a 4xx
        except (urllib.error.URLError, OSError) as exc:
            log.warning("exit event not delivered yet: %s", exc)
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

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=1.0)

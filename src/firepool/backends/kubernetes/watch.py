"""One list+watch loop over the namespace's pods, on a thread of its own.

The loop lists (learning a resourceVersion), then watches from that version with bookmarks,
re-opening the stream from the last version it saw whenever the server ends it. A 410 Gone
(the version fell out of the server's window) or a stream error makes it re-list; so does
`resync_s` passing. A stream that stays silent past the server's timeout plus `silence_s` was
dropped without a FIN (a NAT or load balancer forgot it): the read fails and the loop goes on
from the last version. A paged list whose `continue` token expired (etcd compacted it) starts
again from the first page. Every list and event is
handed to `on_list` / `on_event`, which the backend turns into calls on its event loop, so the
cache is only ever touched from one thread.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from firepool.backends.kubernetes.errors import BackendError, map_exception
from firepool.backends.kubernetes.ratelimit import backoff_delay
from firepool.backends.kubernetes.rest import Rest

log = logging.getLogger("firepool.backends.kubernetes.watch")

ListHandler = Callable[[list[dict[str, Any]], str], None]
EventHandler = Callable[[str, dict[str, Any]], None]
#: What the backend keeps of a pod (None: not one of ours). Applied on the watch thread, page
#: by page, so a relist never holds every full pod of the namespace at once.
Keep = Callable[[dict[str, Any]], "dict[str, Any] | None"]


def _keep_all(pod: dict[str, Any]) -> dict[str, Any] | None:
    return pod


#: Failed watches in a row before the next try lists afresh. Connection errors through an API
#: server restart keep the resourceVersion (a relist of 10,000 pods costs more than a few
#: retries); a version the server no longer has says so itself, with 410.
_RELIST_AFTER_FAILURES = 8


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410 or an ERROR event with code 410)."""


class PodWatcher:
    def __init__(
        self,
        rest: Rest,
        namespace: str,
        selector: str,
        *,
        on_list: ListHandler,
        on_event: EventHandler,
        timeout_s: int,
        resync_s: float,
        page: int = 500,
        silence_s: float = 30.0,
        keep: Keep = _keep_all,
    ) -> None:
        self.rest = rest
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.selector = selector
        self.on_list = on_list
        self.on_event = on_event
        self.timeout_s = timeout_s
        self.resync_s = resync_s
        self.page = page
        self.silence_s = silence_s
        self.keep = keep
        self.version: str | None = None
        self.listed_at = 0.0
        self.lists = 0
        self.relists_after_gone = 0
        self.restarted_lists = 0
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name="k8s-pod-watch", daemon=True)
        self._rng = random.Random()

    def start(self, version: str | None = None) -> None:
        """Start watching; from `version` if the caller already listed (and handled) the pods."""
        if version:
            self.version = version
            self.listed_at = time.monotonic()
            self.lists += 1
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:  # closing a half-read socket may raise; it is closed either way
                log.debug("closing the watch stream", exc_info=True)
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ list

    def list_all(self) -> tuple[list[dict[str, Any]], str]:
        """Every pod of ours, page by page, and the list's resourceVersion (one consistent
        snapshot: an expired `continue` token restarts the list, never splices two). Small
        pages keep each JSON decode short, and so the GIL free for the event loop: one page of
        5,000 pods is a 17 MB `json.loads` that holds it for half a second."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        restarts = 0
        while True:
            query = [("labelSelector", self.selector), ("limit", str(self.page))]
            if token:
                query.append(("continue", token))
            try:
                answer = self.rest.request("GET", self.path, "list pods", query=query)
            except BackendError as err:
                if err.status != 410 or token is None or restarts >= 3:
                    raise
                log.info("list continue token expired after %d pods; listing again", len(items))
                items, token, restarts = [], None, restarts + 1
                self.restarted_lists += 1
                continue
            meta = answer.get("metadata") or {}
            for item in answer.pop("items", None) or []:  # full pods live one page long
                kept = self.keep(item)
                if kept is not None:
                    items.append(kept)
            token = meta.get("continue") or None
            if token is None:
                return items, str(meta.get("resourceVersion") or "")

    # ------------------------------------------------------------------ loop

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self.version is None or time.monotonic() - self.listed_at > self.resync_s:
                    items, version = self.list_all()
                    self.version = version
                    self.listed_at = time.monotonic()
                    self.lists += 1
                    self.on_list(items, version)
                self._watch_once()
                failures = 0
            except Gone:
                log.info("watch resourceVersion %s expired; re-listing", self.version)
                self.relists_after_gone += 1
                self.version = None
            except Exception as exc:
                if self._stop.is_set():
                    return
                error: BackendError = map_exception(exc, "watch pods")
                failures += 1
                delay = backoff_delay(min(failures, 6), 0.2, 10.0, self._rng)
                log.warning("pod watch failed (%s); retry in %.1fs", error.message, delay)
                if failures >= _RELIST_AFTER_FAILURES:
                    self.version = None  # a long outage: start from a fresh list
                self._stop.wait(delay)

    def _watch_once(self) -> None:
        query = [
            ("labelSelector", self.selector),
            ("resourceVersion", self.version or ""),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.timeout_s)),
        ]
        try:
            stream, events = self.rest.watch(self.path, query, self.timeout_s, self.silence_s)
        except BackendError as err:
            if err.status == 410:
                raise Gone() from None
            raise
        self._stream = stream
        try:
            for event in events:
                if self._stop.is_set():
                    return
                kind = str(event.get("type") or "")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise BackendError(
                        f"watch pods: {obj.get('message') or obj}", status=obj.get("code")
                    )
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    kept = self.keep(obj)
                    if kept is not None:
                        self.on_event(kind, kept)
                if version:
                    self.version = str(version)
        finally:
            self._stream = None
            stream.release_conn()

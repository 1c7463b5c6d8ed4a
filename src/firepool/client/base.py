"""What `Client` and `AsyncClient` hold in common apart from sending: configuration, the
headers, the per-client package cache and the session key."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from firepool import __version__
from firepool.api.schemas import JobOut
from firepool.client import calls
from firepool.client.config import ClientConfig, resolve
from firepool.client.retry import DEFAULT_BUDGET_S
from firepool.client.session import Session, session_defaults
from firepool.protocol import UNIX_URL_PREFIX

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
DEFAULT_TIMEOUT = 30.0
#: How long a call safe to repeat keeps being retried through 503s (a store restart).
DEFAULT_RETRY_S = DEFAULT_BUDGET_S


class ClientBase:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        data_dir: str | os.PathLike[str] | None = None,
        retry_s: float = DEFAULT_RETRY_S,
    ) -> None:
        self.config: ClientConfig = resolve(url, token, data_dir=data_dir)
        self.timeout = timeout
        #: Seconds a 503 is waited out on a call safe to repeat before it is raised (0: never).
        self.retry_s = retry_s
        #: Digests this client has uploaded or seen accepted: each is sent at most once.
        self._uploaded: set[str] = set()
        self._session_key = object()

    @property
    def url(self) -> str:
        return self.config.url

    def _endpoint(self) -> tuple[str, str | None]:
        """The HTTP base URL and, for `unix:<path>` (a pod's relay to its broker, see
        agent/broker_relay.py), the socket to send it over."""
        if self.url.startswith(UNIX_URL_PREFIX):
            return "http://firepool", self.url.removeprefix(UNIX_URL_PREFIX)
        return self.url, None

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"firepool-sdk/{__version__}"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        return headers

    def _submission(
        self,
        pool: str,
        command: Sequence[str],
        options: calls.SubmitOptions,
        digest: str | None,
        wait_s: float | None,
    ) -> calls.Call[JobOut]:
        """The submission both clients send, with this client's session defaults (once the
        package, if any, is uploaded as `digest`)."""
        body = calls.submit_body(
            pool,
            command,
            options,
            package_digest=digest,
            session=session_defaults(self._session_key),
        )
        return calls.submit(body, wait_s=wait_s)

    def session(self, lease_tag: str | None = None, *, queue: str | None = None) -> Session:
        """A reuse session: submissions inside `with` (or `async with`) carry this lease tag
        (a fresh random one when none is given) and, if given, this queue."""
        return Session(self._session_key, lease_tag, queue)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.url!r})"


def is_digest(value: object) -> bool:
    return isinstance(value, str) and DIGEST.match(value) is not None

"""What `Client` and `AsyncClient` hold in common apart from sending: configuration, the
headers, the per-client package cache and the session key."""

from __future__ import annotations

import os
import re

from firepool import __version__
from firepool.client.config import ClientConfig, resolve
from firepool.client.retry import DEFAULT_BUDGET_S
from firepool.client.session import Session

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

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"firepool-sdk/{__version__}"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        return headers

    def session(self, lease_tag: str | None = None, *, queue: str | None = None) -> Session:
        """A reuse session: submissions inside `with` (or `async with`) carry this lease tag
        (a fresh random one when none is given) and, if given, this queue."""
        return Session(self._session_key, lease_tag, queue)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.url!r})"


def is_digest(value: object) -> bool:
    return isinstance(value, str) and DIGEST.match(value) is not None

"""Reuse sessions: `with client.session(lease_tag=...)` stamps every submission inside it.

A lease tag names one session of a caller; the broker hands a session's jobs the same warm
pod and retires a pod that crosses into another session. The defaults live in a context
variable keyed by client, so concurrent threads or asyncio tasks sharing one client each see
only the session they entered, and nested sessions restore the outer one on exit.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from contextvars import ContextVar, Token
from types import MappingProxyType, TracebackType

_ACTIVE: ContextVar[Mapping[object, Mapping[str, str]]] = ContextVar(
    "firepool_sessions", default=MappingProxyType({})
)


def new_lease_tag() -> str:
    return "session-" + secrets.token_hex(6)


def session_defaults(key: object) -> Mapping[str, str]:
    """The submission fields the innermost session entered for client `key` sets."""
    return _ACTIVE.get().get(key, {})


class Session:
    """A context manager (plain or async) that sets `lease_tag` (and `queue`, if given) on
    every submission of one client while it is entered."""

    def __init__(self, key: object, lease_tag: str | None, queue: str | None) -> None:
        self._key = key
        self.lease_tag = lease_tag or new_lease_tag()
        self.queue = queue
        self._tokens: list[Token[Mapping[object, Mapping[str, str]]]] = []

    @property
    def fields(self) -> dict[str, str]:
        fields = {"lease_tag": self.lease_tag}
        if self.queue is not None:
            fields["queue"] = self.queue
        return fields

    def __enter__(self) -> Session:
        active = _ACTIVE.get()
        self._tokens.append(_ACTIVE.set({**active, self._key: self.fields}))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _ACTIVE.reset(self._tokens.pop())

    async def __aenter__(self) -> Session:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

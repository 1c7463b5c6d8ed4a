"""Reuse sessions: `with client.session(lease_tag=...)` stamps every submission inside it.

A lease tag names one session of a caller; the broker hands a session's jobs the same warm
pod and retires a pod that crosses into another session. The defaults live in a context
variable keyed by client, so concurrent threads or asyncio tasks sharing one client each see
only the session they entered, and nested sessions restore the outer one on exit.

The session a client hands out can also submit and run jobs itself (`session.run(...)`), as
users of `requests.Session` expect: its fields apply to those calls whether or not the session
is entered, and only to them (a call stamps its own context, so threads sharing one session
object never interleave their context tokens).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Unpack

if TYPE_CHECKING:
    from firepool.api.schemas import JobOut
    from firepool.client.aio import AsyncClient
    from firepool.client.calls import SubmitOptions
    from firepool.client.sync import Client

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

    @contextmanager
    def _applied(self) -> Iterator[None]:
        """This session's fields for the calls made inside, in the caller's own context."""
        token = _ACTIVE.set({**_ACTIVE.get(), self._key: self.fields})
        try:
            yield
        finally:
            _ACTIVE.reset(token)

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


class ClientSession(Session):
    """`Client.session(...)`: a session that also submits and runs jobs through its client."""

    def __init__(self, client: Client, lease_tag: str | None, queue: str | None) -> None:
        super().__init__(client._session_key, lease_tag, queue)
        self.client = client

    def __enter__(self) -> ClientSession:
        super().__enter__()
        return self

    async def __aenter__(self) -> ClientSession:
        return self.__enter__()

    def submit(self, pool: str, command: Sequence[str], **options: Unpack[SubmitOptions]) -> JobOut:
        """`Client.submit` with this session's lease tag (and queue)."""
        with self._applied():
            return self.client.submit(pool, command, **options)

    def run(
        self,
        pool: str,
        command: Sequence[str],
        *,
        wait_timeout: float | None = None,
        **options: Unpack[SubmitOptions],
    ) -> JobOut:
        """`Client.run` with this session's lease tag (and queue): submit and wait."""
        with self._applied():
            return self.client.run(pool, command, wait_timeout=wait_timeout, **options)


class AsyncClientSession(Session):
    """`AsyncClient.session(...)`: a session that also submits and runs jobs."""

    def __init__(self, client: AsyncClient, lease_tag: str | None, queue: str | None) -> None:
        super().__init__(client._session_key, lease_tag, queue)
        self.client = client

    def __enter__(self) -> AsyncClientSession:
        super().__enter__()
        return self

    async def __aenter__(self) -> AsyncClientSession:
        return self.__enter__()

    async def submit(
        self, pool: str, command: Sequence[str], **options: Unpack[SubmitOptions]
    ) -> JobOut:
        """`AsyncClient.submit` with this session's lease tag (and queue)."""
        with self._applied():
            return await self.client.submit(pool, command, **options)

    async def run(
        self,
        pool: str,
        command: Sequence[str],
        *,
        wait_timeout: float | None = None,
        **options: Unpack[SubmitOptions],
    ) -> JobOut:
        """`AsyncClient.run` with this session's lease tag (and queue): submit and wait."""
        with self._applied():
            return await self.client.run(pool, command, wait_timeout=wait_timeout, **options)

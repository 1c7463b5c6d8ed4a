"""`client/aio.py` and `client/sync.py` are one SDK written twice (as SkyPilot's `sdk.py` and
`sdk_async.py`): each public method of the sync client has its async twin with the same
parameters, defaults, annotations (up to the async types) and docstring, and the async one is
a coroutine wherever the sync one does I/O. A change to one side that forgets the other fails
here; the self-test shows each kind of drift is reported."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator

from firepool.client.aio import AsyncClient
from firepool.client.session import AsyncClientSession, ClientSession
from firepool.client.sync import Client

#: What the async side's annotations say where the sync side's say the other.
ASYNC_NAMES = {"AsyncIterator": "Iterator", "AsyncClientSession": "ClientSession",
               "AsyncClient": "Client", "Awaitable": ""}
#: Protocol methods named differently on each side.
TWINS = {"__aenter__": "__enter__", "__aexit__": "__exit__"}
#: Sync methods that do no I/O, so their twins are plain functions too.
NO_IO = {"session"}


def _as_sync(annotation: object) -> str:
    text = str(annotation)
    for async_name, sync_name in ASYNC_NAMES.items():
        text = text.replace(async_name, sync_name)
    return text


def _public(cls: type, protocol: bool) -> dict[str, object]:
    names = {n for n in vars(cls)
             if not n.startswith("_") or (protocol and (n in TWINS or n in TWINS.values()))}
    return {TWINS.get(n, n): getattr(cls, n) for n in names if callable(getattr(cls, n))}


def differences(async_cls: type, sync_cls: type, *, protocol: bool = True) -> list[str]:
    """Each way `async_cls` is not the async twin of `sync_cls`, in words; `protocol` when
    each is a context manager of its own kind only (a session is both kinds on both sides)."""
    found: list[str] = []
    twins, ours = _public(async_cls, protocol), _public(sync_cls, protocol)
    for name in sorted(set(twins) ^ set(ours)):
        side = async_cls if name in twins else sync_cls
        found.append(f"{name}: only on {side.__name__}")
    for name in sorted(set(twins) & set(ours)):
        a, s = twins[name], ours[name]
        sa, ss = inspect.signature(a), inspect.signature(s)  # type: ignore[arg-type]
        params_a = [(p.name, p.kind, p.default, _as_sync(p.annotation))
                    for p in sa.parameters.values()]
        params_s = [(p.name, p.kind, p.default, str(p.annotation))
                    for p in ss.parameters.values()]
        if params_a != params_s:
            found.append(f"{name}: parameters {sa} vs {ss}")
        if _as_sync(sa.return_annotation) != str(ss.return_annotation):
            found.append(f"{name}: returns {sa.return_annotation} vs {ss.return_annotation}")
        if _as_sync(inspect.getdoc(a)) != str(inspect.getdoc(s)):
            found.append(f"{name}: docstrings differ")
        wants_async = (name not in NO_IO and not name.startswith("_")) or name in TWINS.values()
        is_async = inspect.iscoroutinefunction(a) or inspect.isasyncgenfunction(a)
        if wants_async != is_async:
            found.append(f"{name}: {'not ' if wants_async else ''}a coroutine on "
                         f"{async_cls.__name__}")
    return found


def test_the_async_client_is_the_sync_clients_twin() -> None:
    assert differences(AsyncClient, Client) == []


def test_the_async_session_is_the_sync_sessions_twin() -> None:
    assert differences(AsyncClientSession, ClientSession, protocol=False) == []


class _Sync:
    def get(self, job_id: str, timeout: float = 1.0) -> Iterator[str]:
        """Reads a job."""
        raise NotImplementedError

    def close(self) -> None:
        """Closes."""

    def session(self) -> None:
        """No I/O."""


class _AsyncDrifted:
    async def get(self, job_id: str, timeout: float = 2.0) -> AsyncIterator[str]:
        """Reads a job."""
        raise NotImplementedError

    def close(self) -> None:  # should be a coroutine
        """Closes the client."""

    async def extra(self) -> None:
        """Only here."""


def test_each_kind_of_drift_is_reported() -> None:
    found = differences(_AsyncDrifted, _Sync)
    assert any(f.startswith("get: parameters") for f in found), found  # a default changed
    assert "close: docstrings differ" in found
    assert "close: not a coroutine on _AsyncDrifted" in found
    assert "extra: only on _AsyncDrifted" in found
    assert "session: only on _Sync" in found

"""Faults and records at the API client's edge, for tests against a real API server.

`answers_lost` lets a call reach the server and commit there, and then loses its answer as a
connection reset would: the case where a client's retry finds its own object (409) and must
adopt it rather than clean up around it. `recorded_calls` lists every call the backend makes,
so the RBAC test can hold the shipped Role against what the code really does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from urllib3.exceptions import ProtocolError

from firepool.backends.kubernetes.rest import Rest


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    watch: bool = False


@contextlib.contextmanager
def answers_lost(method: str, path_suffix: str, times: int = 1) -> Iterator[list[str]]:
    """The next `times` calls of `method` on a path ending in `path_suffix` are sent and
    answered by the server, and then fail as if the connection dropped before the answer came
    back. Yields the paths whose answers were lost."""
    lost: list[str] = []
    real = Rest._send

    def send(self: Rest, verb: str, path: str, **kw: Any) -> Any:
        answer = real(self, verb, path, **kw)
        if verb == method and path.endswith(path_suffix) and len(lost) < times:
            answer.read()  # the server has committed; only the answer goes missing
            lost.append(path)
            raise ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
        return answer

    Rest._send = send  # type: ignore[method-assign,assignment]
    try:
        yield lost
    finally:
        Rest._send = real  # type: ignore[method-assign]


@contextlib.contextmanager
def recorded_calls() -> Iterator[list[Call]]:
    """Every request any `Rest` sends while inside, in order."""
    calls: list[Call] = []
    real = Rest._send

    def send(self: Rest, verb: str, path: str, **kw: Any) -> Any:
        query = dict(kw.get("query") or [])
        calls.append(Call(verb, path, watch=query.get("watch") == "true"))
        return real(self, verb, path, **kw)

    Rest._send = send  # type: ignore[method-assign,assignment]
    try:
        yield calls
    finally:
        Rest._send = real  # type: ignore[method-assign]


@contextlib.contextmanager
def after_first(
    method: str, path_suffix: str, action: Callable[[], None], *, with_query: str = ""
) -> Iterator[list[str]]:
    """Run `action` once, in the calling thread, right after the first call of `method` on a
    path ending in `path_suffix` (and with `with_query` among its query names) has its whole
    answer: e.g. compact etcd between two pages of a list. Yields the paths it ran after."""
    ran: list[str] = []
    real = Rest._send

    def send(self: Rest, verb: str, path: str, **kw: Any) -> Any:
        answer = real(self, verb, path, **kw)
        names = {name for name, _ in kw.get("query") or []}
        if (
            not ran
            and verb == method
            and path.endswith(path_suffix)
            and (not with_query or with_query in names)
        ):
            answer.read()  # the answer is in hand before the world changes
            ran.append(path)
            action()
        return answer

    Rest._send = send  # type: ignore[method-assign,assignment]
    try:
        yield ran
    finally:
        Rest._send = real  # type: ignore[method-assign]

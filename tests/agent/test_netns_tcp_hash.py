"""`netns.enter_new`: the pod's namespace owns a TCP hash table, and the host's stays as it was.

Each test runs in a thread of its own, since a namespace is entered per thread. Where this
machine refuses a network namespace, or its kernel gives a namespace no table of its own, the
tests skip, except under CI, whose machines give both: there that fails.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from firepool.agent import netns

T = TypeVar("T")


def in_new_namespace(probe: Callable[[], T]) -> T:
    """`probe()` run in a thread moved into `enter_new`'s namespace, and back."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            host = netns.enter_new()
            if host is None:
                return
            try:
                out.append(probe())
            finally:
                netns.leave(host)
        except BaseException as exc:  # reported on the test's thread
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    if failed:
        raise failed[0]
    if not out:
        missing("a network namespace")
    return out[0]


def missing(what: str) -> None:
    """A real component this machine lacks: a failure under CI, a skip elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"this CI machine gives no {what}")
    pytest.skip(f"this machine gives no {what}")


def tcp_hash_buckets() -> int:
    """The calling thread's namespace's TCP hash table: its bucket count, negative when it
    shares the host's (the kernel's convention), 0 where the kernel does not say."""
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_ehash_entries").read_text())
    except FileNotFoundError:
        return 0


def kernel_offers_own_tables() -> bool:
    return Path(netns.CHILD_TCP_HASH).exists() and os.access(netns.CHILD_TCP_HASH, os.W_OK)


def test_the_pods_namespace_owns_its_tcp_hash_and_the_host_keeps_its_setting() -> None:
    before = Path(netns.CHILD_TCP_HASH).read_text() if kernel_offers_own_tables() else None
    buckets = in_new_namespace(tcp_hash_buckets)
    if not kernel_offers_own_tables():
        missing("TCP hash table of a namespace's own (tcp_child_ehash_entries)")
    assert buckets == netns.POD_TCP_HASH_BUCKETS
    assert Path(netns.CHILD_TCP_HASH).read_text() == before  # the host's, untouched


def test_the_pods_namespace_works_as_before_with_its_own_table() -> None:
    """Loopback up, a listener and a connection on it, and the reset's socket check sees both
    (the file it reads lists the namespace's table, whatever its size)."""

    def probe() -> list[str]:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            with socket.create_connection(server.getsockname(), timeout=5):
                return netns.held_sockets("/proc/thread-self/net")

    held = in_new_namespace(probe)
    assert any("LISTEN" in s for s in held), held
    assert any("ESTABLISHED" in s for s in held), held


def test_where_the_kernel_refuses_an_own_table_the_namespace_shares_the_hosts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(netns, "CHILD_TCP_HASH", str(tmp_path / "absent" / "setting"))
    buckets = in_new_namespace(tcp_hash_buckets)
    assert buckets <= 0  # shared (negative), or a kernel that does not say (0)
    assert in_new_namespace(lambda: netns.held_sockets("/proc/thread-self/net")) == []

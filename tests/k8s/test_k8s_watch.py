"""The pod watch where only a real server can test it: a connection that goes silent, an API
server restart, etcd compaction (410 Gone, for a watch and for a paged list), and more pods
than one list page. In each, the cache must end where the cluster is, with nothing missed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.cache import Change
from firepool.backends.kubernetes.rest import Rest
from firepool.backends.kubernetes.status import Phase
from firepool.testing.api_faults import after_first, recorded_calls
from firepool.testing.control_plane import ControlPlane, write_kubeconfig
from firepool.testing.kwok import TEST_CPU_POOL, create_ready, run_bounded
from firepool.testing.tcp_relay import TcpRelay

pytestmark = pytest.mark.k8s


@pytest.fixture
def relay(plane: ControlPlane) -> Any:
    relay = TcpRelay("127.0.0.1", plane.api_port)
    yield relay
    relay.close()


def through(
    relay: TcpRelay, settings: KubernetesSettings, plane: ControlPlane, token: str, tmp: Path
) -> KubernetesSettings:
    """`settings` with the API server reached through `relay`."""
    kubeconfig = write_kubeconfig(
        tmp / "relayed.kubeconfig",
        f"https://{relay.address}",
        plane.ca.pair.cert,
        token=token,
        namespace=settings.namespace,
    )
    return settings.model_copy(update={"kubeconfig": str(kubeconfig)})


def delete_now(admin: Rest, namespace: str, name: str) -> None:
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", "delete", body=body)


def touch(admin: Rest, namespace: str, name: str, value: str) -> None:
    admin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        "annotate",
        body={"metadata": {"annotations": {"fp-test/touched": value}}},
        content_type="application/merge-patch+json",
    )


async def until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.05)


def touched(backend: KubernetesBackend, name: str) -> str | None:
    pod = backend.cache.pods.get(name)
    return (
        None if pod is None else (pod["metadata"].get("annotations") or {}).get("fp-test/touched")
    )


def test_a_silently_dropped_watch_is_noticed_and_nothing_is_missed(
    settings: KubernetesSettings,
    plane: ControlPlane,
    relay: TcpRelay,
    broker_token: str,
    admin: Rest,
    tmp_path: Path,
) -> None:
    """No FIN, no RST: only the read deadline (server timeout + silence) notices. Before it
    had one, a stream dropped this way left the cache frozen until the next resync."""
    brief = through(relay, settings, plane, broker_token, tmp_path).model_copy(
        update={"watch_timeout_s": 3, "watch_silence_s": 1.0, "resync_s": 3600.0}
    )

    async def go() -> None:
        backend = KubernetesBackend(brief)
        seen: list[Change] = []
        try:
            await backend.start()
            (name,) = await create_ready(backend, PodCreate(pool=TEST_CPU_POOL, name="quiet"))
            backend.on_change = seen.append
            relay.freeze()
            frozen_at = time.monotonic()
            await asyncio.to_thread(delete_now, admin, settings.namespace, name)
            await until(
                lambda: any(c.name == name and c.observed.phase is Phase.LOST for c in seen),
                20,
                "the deletion seen after the silent drop",
            )
            # Within the read deadline plus a retry, not at the hour's resync.
            assert time.monotonic() - frozen_at < 10
        finally:
            await backend.close()  # its pooled connections are frozen: no delete_all here

    run_bounded(go)


def test_the_watch_resumes_through_an_api_server_restart(
    settings: KubernetesSettings, plane: ControlPlane, admin: Rest
) -> None:
    async def go() -> None:
        backend = KubernetesBackend(settings.model_copy(update={"resync_s": 3600.0}))
        try:
            await backend.start()
            names = await create_ready(
                backend, *(PodCreate(pool=TEST_CPU_POOL, name=f"r-{i}") for i in range(2))
            )
            lists = backend._watcher.lists if backend._watcher else 0
            await asyncio.to_thread(plane.restart_apiserver)
            await asyncio.to_thread(delete_now, admin, settings.namespace, names[0])
            await asyncio.to_thread(touch, admin, settings.namespace, names[1], "after")
            await until(
                lambda: (
                    names[0] not in backend.cache.pods and touched(backend, names[1]) == "after"
                ),
                30,
                "the changes after the restart",
            )
            assert backend._watcher is not None and backend._watcher.lists >= lists
        finally:
            await backend.delete_all()
            await backend.close()

    run_bounded(go)


def test_a_watch_older_than_compaction_relists_and_misses_nothing(
    settings: KubernetesSettings,
    plane: ControlPlane,
    relay: TcpRelay,
    broker_token: str,
    admin: Rest,
    tmp_path: Path,
) -> None:
    """The watch goes quiet; meanwhile pods change, etcd compacts and the API server restarts
    (its watch cache forgets the old versions). The watch comes back with a resourceVersion
    that no longer exists: 410 Gone, and a fresh list must show what happened meanwhile."""
    # A read deadline longer than the restart, so the watch's first retry finds the server up.
    brief = through(relay, settings, plane, broker_token, tmp_path).model_copy(
        update={"watch_timeout_s": 3, "watch_silence_s": 8.0, "resync_s": 3600.0}
    )

    async def go() -> None:
        backend = KubernetesBackend(brief)
        try:
            await backend.start()
            names = await create_ready(
                backend, *(PodCreate(pool=TEST_CPU_POOL, name=f"c-{i}") for i in range(2))
            )
            relay.freeze()
            await asyncio.to_thread(delete_now, admin, settings.namespace, names[0])
            await asyncio.to_thread(touch, admin, settings.namespace, names[1], "compacted")
            await asyncio.to_thread(plane.compact_etcd)
            await asyncio.to_thread(plane.restart_apiserver)
            watcher = backend._watcher
            assert watcher is not None
            await until(
                lambda: (
                    names[0] not in backend.cache.pods and touched(backend, names[1]) == "compacted"
                ),
                40,
                "the relist after 410",
            )
            assert watcher.relists_after_gone >= 1
        finally:
            await backend.close()

    run_bounded(go)


def test_more_pods_than_one_page_and_a_continue_token_outlived_by_compaction(
    settings: KubernetesSettings, plane: ControlPlane, admin: Rest
) -> None:
    """A restart lists 12 pods in pages of 5. Between the first page and the next, a pod
    changes, etcd compacts and the API server restarts: the `continue` token is too old (410),
    and the list starts over instead of splicing two snapshots."""
    paged = settings.model_copy(update={"list_page": 5})

    async def go() -> None:
        first = KubernetesBackend(paged)
        try:
            await first.start()
            names = await create_ready(
                first, *(PodCreate(pool=TEST_CPU_POOL, name=f"p-{i:02d}") for i in range(12))
            )
        finally:
            await first.close()

        second = KubernetesBackend(paged)
        with recorded_calls() as calls:
            records = await second.list_pods()
        pages = [c for c in calls if c.path.endswith("/pods") and c.method == "GET" and not c.watch]
        assert {r.name for r in records} == set(names) and len(pages) == 3
        await second.close()

        def change_compact_and_restart() -> None:
            # A write first: etcd keeps the revision it compacts at, so the token's revision
            # is gone only once a newer one exists.
            touch(admin, settings.namespace, names[0], "between-pages")
            plane.compact_etcd()
            plane.restart_apiserver()

        third = KubernetesBackend(paged)
        try:
            with after_first("GET", "/pods", change_compact_and_restart, with_query="limit") as ran:
                records = await third.list_pods()
            assert ran and {r.name for r in records} == set(names)
            assert third._watcher is not None and third._watcher.restarted_lists == 1
            # One snapshot, taken after the change: not a first page from before it.
            assert touched(third, names[0]) == "between-pages"
        finally:
            await third.delete_all()
            await third.close()

    run_bounded(go, timeout=180)

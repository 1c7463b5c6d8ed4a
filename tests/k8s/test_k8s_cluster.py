"""The Kubernetes backend against a real API server, scheduler and kwok nodes."""

from __future__ import annotations

import asyncio
import time

import pytest

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.cache import Change
from firepool.backends.kubernetes.rest import Rest
from firepool.backends.kubernetes.status import Phase
from firepool.model import PodRole
from firepool.testing.kwok import (
    TEST_CPU_POOL,
    TEST_GPU_NODES,
    TEST_GPU_POOL,
    agent_container,
    create_ready,
    node_of,
    run_bounded,
)

pytestmark = pytest.mark.k8s  # `make test-k8s` runs this folder alone

CPU = TEST_CPU_POOL
GPU = TEST_GPU_POOL


def test_create_watch_delete_at_the_rate_limit(settings: KubernetesSettings) -> None:
    paced = settings.model_copy(update={"qps": 20.0, "burst": 1})
    count = 40

    async def go() -> None:
        backend = KubernetesBackend(paced)
        try:
            await backend.start()
            started = time.monotonic()
            names = await create_ready(
                backend, *(PodCreate(pool=CPU, name=f"cpu-{i}") for i in range(count))
            )
            elapsed = time.monotonic() - started
            # 40 creates at 20/s with a burst of 1 take at least 39/20 s.
            assert elapsed >= (count - 1) / paced.qps * 0.95
            records = await backend.list_pods()
            assert {r.name for r in records} == set(names)
            assert all(r.alive and r.address for r in records)
            started = time.monotonic()
            await asyncio.gather(*(backend.delete(n) for n in names))
            assert time.monotonic() - started >= (count - 1) / paced.qps * 0.95
            deadline = time.monotonic() + 30
            while backend.cache.pods and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert not backend.cache.pods  # every deletion came back through the watch
            await asyncio.gather(*(backend.delete(n) for n in names))  # idempotent
        finally:
            await backend.close()

    run_bounded(go)


def test_gpu_pods_land_on_gpu_nodes_and_standbys_beside_them(
    settings: KubernetesSettings, admin: Rest, namespace: str
) -> None:
    async def go() -> None:
        backend = KubernetesBackend(settings)
        try:
            await backend.start()
            actives = await create_ready(
                backend, *(PodCreate(pool=GPU, name=f"gpu-{i}") for i in range(3))
            )
            for name in actives:
                assert node_of(backend, name) in TEST_GPU_NODES
                container = await asyncio.to_thread(agent_container, admin, namespace, name)
                assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
            standby = PodCreate(
                pool=GPU,
                role=PodRole.STANDBY,
                group=actives[0],
                devices=("GPU-kwok-0",),
                name="gpu-0-sb",
            )
            (name,) = await create_ready(backend, standby)
            assert node_of(backend, name) == node_of(backend, actives[0])
            container = await asyncio.to_thread(agent_container, admin, namespace, name)
            assert "nvidia.com/gpu" not in container["resources"]["limits"]
            record = await backend.get(name)
            assert record is not None and record.devices == ("GPU-kwok-0",)
            assert record.role is PodRole.STANDBY
        finally:
            await backend.delete_all()
            await backend.close()

    run_bounded(go)


def test_pod_deleted_behind_our_back_is_lost_within_one_event(
    settings: KubernetesSettings, admin: Rest
) -> None:
    async def go() -> None:
        backend = KubernetesBackend(settings)
        seen: list[Change] = []
        try:
            await backend.start()
            (name,) = await create_ready(backend, PodCreate(pool=CPU, name="victim"))
            backend.on_change = seen.append
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
            await asyncio.to_thread(
                admin.request,
                "DELETE",
                f"/api/v1/namespaces/{settings.namespace}/pods/{name}",
                "delete",
                body=body,
            )
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert seen, "no watch event for the deleted pod"
            first = seen[0]
            assert first.name == name and first.observed.phase is Phase.LOST
            assert await backend.get(name) is None or not (await backend.get(name)).alive
        finally:
            await backend.delete_all()
            await backend.close()

    run_bounded(go)


def test_restart_recovers_every_pod_from_its_annotations(settings: KubernetesSettings) -> None:
    async def go() -> None:
        first = KubernetesBackend(settings)
        try:
            await first.start()
            names = await create_ready(
                first,
                PodCreate(pool=CPU, name="keep-0", annotations={"state": "idle", "role": "active"}),
                PodCreate(pool=GPU, name="keep-1", annotations={"state": "running", "job": "j-1"}),
            )
            (sb,) = await create_ready(
                first,
                PodCreate(pool=GPU, role=PodRole.STANDBY, group="keep-1", devices=("GPU-x",),
                          name="keep-2", annotations={"state": "idle", "group": "keep-1"}),
            )  # fmt: skip
            await first.annotate("keep-0", {"owner": "alice", "hold_until": "123.5", "role": None})
            before = {r.name: r for r in await first.list_pods()}
        finally:
            await first.close()
        second = KubernetesBackend(settings)
        try:
            after = {r.name: r for r in await second.list_pods()}
            assert set(after) == {*names, sb}
            for name, old in before.items():
                new = after[name]
                assert new.annotations == old.annotations
                assert new.secret == old.secret and new.secret
                assert (new.pool, new.role, new.devices) == (old.pool, old.role, old.devices)
                assert new.created_at == old.created_at and new.alive
            assert after["keep-0"].annotations == {
                "state": "idle",
                "owner": "alice",
                "hold_until": "123.5",
            }
        finally:
            await second.delete_all()
            await second.close()

    run_bounded(go)

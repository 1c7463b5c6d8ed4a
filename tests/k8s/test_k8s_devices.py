"""A standby reaches its active pod's card the way it will on a real cluster: the device plugin
picks the card, the active pod's agent reports it, the backend records it, and the core's
standby is pinned to it on the same node. No test passes a device in by hand.

Before, the active pod got no devices, its agent hid the card from every job, and no standby
could ever be made, while the cluster tests passed because they named the card themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.rest import Rest
from firepool.control.actions import Action, CreatePod
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore
from firepool.model import PodRole
from firepool.service.pods import PodManager
from firepool.testing.kwok import (
    TEST_GPU_NODES,
    TEST_GPU_POOL,
    agent_container,
    node_of,
    run_bounded,
)
from firepool.testing.kwok_agents import DEVICE_PLUGIN_ENV, PodAgents

pytestmark = pytest.mark.k8s

GPU = TEST_GPU_POOL.model_copy(update={"min_count": 1, "max_count": 1})


def creates(actions: list[Action]) -> list[CreatePod]:
    return [a for a in actions if isinstance(a, CreatePod)]


def env_of(admin: Rest, namespace: str, name: str) -> dict[str, str]:
    container = agent_container(admin, namespace, name)
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def test_a_standby_is_pinned_to_the_card_its_active_pods_agent_reports(
    settings: KubernetesSettings, admin: Rest, namespace: str, tmp_path: Path
) -> None:
    checked = settings.model_copy(update={"agent_health": True})

    async def go() -> None:
        backend = KubernetesBackend(checked)
        agents = PodAgents(admin, namespace, tmp_path)
        names = iter(["gpu-active", "gpu-standby"])
        core = BrokerCore(
            [GPU], BudgetLedger({GPU.budget_resource: 8}), new_name=lambda _pool: next(names)
        )
        manager = PodManager(backend, callback_url=lambda: None, ready_timeout_s=60)
        following = asyncio.create_task(agents.follow(backend))
        try:
            await backend.start()
            (active,) = creates(core.reconcile(GPU.name, time.time()))
            assert active.order.role is PodRole.ACTIVE
            await manager.create(active.order, GPU, active.peer)
            core.pod_ready(active.order.pod, time.time())
            card = agents.cards[active.order.pod]  # the device plugin's choice
            record = await backend.get(active.order.pod)
            assert record is not None and record.devices == (card,)  # reported, recorded

            (standby,) = creates(core.reconcile(GPU.name, time.time()))
            assert standby.order.role is PodRole.STANDBY and standby.peer == active.order.pod
            await manager.create(standby.order, GPU, standby.peer)
            name = standby.order.pod
            assert node_of(backend, name) == node_of(backend, active.order.pod)
            assert node_of(backend, name) in TEST_GPU_NODES
            env = await asyncio.to_thread(env_of, admin, namespace, name)
            assert env[DEVICE_PLUGIN_ENV] == card
            assert name not in agents.cards  # it asks the device plugin for nothing
            health = await backend.wait_ready(name, timeout=30)
            assert tuple(health.devices) == (card,)  # the standby's agent sees that card
            pinned = await backend.get(name)
            assert pinned is not None and pinned.devices == (card,)
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
            agents.stop_all()
            await backend.delete_all()
            await backend.close()

    run_bounded(go, timeout=150)

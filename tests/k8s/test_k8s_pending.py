"""A pod the scheduler cannot place yet: pending within a bounded wait, not a create/delete loop.

On a cluster with an autoscaler, a pending preemption or terminating pods, "Unschedulable" is a
passing state. The backend keeps the same pod (and the broker its budget) for
`stalled_grace_s`, and only then fails it, with the scheduler's latest reason.
"""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.errors import PodUnschedulableError
from firepool.backends.kubernetes.rest import Rest
from firepool.backends.kubernetes.settings import PodTemplate, Templates
from firepool.backends.kubernetes.status import Phase
from firepool.control.actions import CreatePod, DeletePod
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore
from firepool.service.pods import PodManager
from firepool.testing.control import cpu_pool
from firepool.testing.kwok import (
    TEST_CPU_POOL,
    delete_node,
    ensure_node,
    kwok_node,
    phase_of,
    run_bounded,
)

pytestmark = pytest.mark.k8s

HUGE = cpu_pool("huge", cpus_per_pod=10_000, memory_mib_per_pod=64)


def test_unschedulable_waits_its_grace_keeps_the_budget_then_fails_typed(
    settings: KubernetesSettings,
) -> None:
    brief = settings.model_copy(update={"stalled_grace_s": 3.0})

    async def go() -> None:
        backend = KubernetesBackend(brief)
        floor = HUGE.model_copy(update={"min_count": 1})
        ledger = BudgetLedger({"cpu": 20_000})
        core = BrokerCore([floor], ledger, new_name=lambda _pool: "huge-0")
        manager = PodManager(backend, callback_url=lambda: None, ready_timeout_s=60)
        try:
            await backend.start()
            (create,) = core.reconcile("huge", time.time())
            assert isinstance(create, CreatePod) and ledger.used("cpu") > 0
            started = time.monotonic()
            attempt = asyncio.create_task(manager.create(create.order, floor, create.peer))
            while phase_of(backend, "huge-0") is not Phase.UNSCHEDULABLE:
                await asyncio.sleep(0.05)
            uid = backend.cache.pods["huge-0"]["metadata"]["uid"]
            await asyncio.sleep(1.0)  # within the grace: the same pod, still reserved
            assert not attempt.done()
            assert backend.cache.pods["huge-0"]["metadata"]["uid"] == uid
            assert ledger.used("cpu") > 0
            with pytest.raises(PodUnschedulableError) as err:
                await attempt
            assert time.monotonic() - started >= brief.stalled_grace_s
            # The reason comes from the scheduler's FailedScheduling event, in its words.
            assert err.value.field == "pool" and "Insufficient cpu" in err.value.message
            (delete,) = core.pod_failed("huge-0", time.time())
            assert isinstance(delete, DeletePod)
            await manager.delete(delete.pod)
            core.pod_deleted(delete.pod, time.time())
            assert ledger.used("cpu") == 0 and core.tracker.get("huge-0") is None
        finally:
            await backend.delete_all()
            await backend.close()

    run_bounded(go)


def test_a_pool_unschedulable_until_a_node_joins_ends_ready(
    settings: KubernetesSettings, admin: Rest
) -> None:
    """As with a cluster autoscaler: no node matches the pool until one is added."""
    zone = f"late-{secrets.token_hex(3)}"
    placed = settings.model_copy(
        update={
            "stalled_grace_s": 60.0,
            "templates": Templates(pools={"cpu": PodTemplate(node_selector={"fp-zone": zone})}),
        }
    )
    node = f"fp-test-{zone}"

    async def go() -> None:
        backend = KubernetesBackend(placed)
        try:
            await backend.start()
            record = await backend.create(PodCreate(pool=TEST_CPU_POOL, name="late-0"))
            waiting = asyncio.create_task(backend.wait_ready(record.name, timeout=60))
            while phase_of(backend, "late-0") is not Phase.UNSCHEDULABLE:
                await asyncio.sleep(0.05)
            uid = backend.cache.pods["late-0"]["metadata"]["uid"]
            await asyncio.to_thread(
                ensure_node, admin, kwok_node(node, cpu="4", labels={"fp-zone": zone})
            )
            await waiting
            pod = backend.cache.pods["late-0"]
            assert pod["metadata"]["uid"] == uid  # never deleted and made again
            assert pod["spec"]["nodeName"] == node
        finally:
            await backend.delete_all()
            await backend.close()
            await asyncio.to_thread(delete_node, admin, node)

    run_bounded(go)

"""The watch cache and restart recovery: pods listed from the API become the same records
(pool, role, card, annotations, secret) the broker had before it restarted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from k8s_podjson import pod, running

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.cache import PodCache
from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.records import is_ours, to_record
from firepool.backends.kubernetes.settings import PodTemplate, Templates
from firepool.backends.kubernetes.spec import PodPlan, build_pod
from firepool.backends.kubernetes.status import Phase
from firepool.model import ConfigError, PodRole
from firepool.testing.control import gpu_pool

CODEC = AnnotationCodec("firepool.dev")
SETTINGS = KubernetesSettings(namespace="ns")
GPU = gpu_pool("h100", accelerator="H100", standbys_per_active=1)


def created(
    name: str,
    role: PodRole,
    ann: dict[str, str],
    devices: tuple[str, ...] = (),
    node: str | None = None,
) -> dict[str, Any]:
    """What the API server hands back for a pod we built: our manifest plus a status."""
    manifest = build_pod(
        SETTINGS,
        CODEC,
        PodPlan(
            name=name,
            pool=GPU,
            role=role,
            secret="x" * 20,
            created_at=1000.0 + len(name),
            annotations=ann,
            template=PodTemplate(),
            devices=devices,
            node=node,
            group="h100-a" if role is PodRole.STANDBY else None,
        ),
    )
    live = running(name, node="gpu-7", ip="10.1.2.3", rv="5")
    manifest["metadata"]["resourceVersion"] = "5"
    manifest["status"] = live["status"]
    manifest["spec"]["nodeName"] = "gpu-7"
    return manifest


def test_recovery_from_a_listed_set_of_pods() -> None:
    listed = [
        created(
            "h100-a",
            PodRole.ACTIVE,
            {"state": "running", "owner": "alice", "job": "j1"},
            devices=("GPU-aaaa",),
        ),
        created(
            "h100-b",
            PodRole.STANDBY,
            {"state": "idle", "group": "h100-a"},
            devices=("GPU-aaaa",),
            node="gpu-7",
        ),
        created("h100-c", PodRole.ACTIVE, {"state": "held", "owner": "bob", "hold_until": "99"}),
        pod("someone-elses", labels={"app": "web"}),  # not ours: never adopted
    ]
    listed[2]["metadata"]["deletionTimestamp"] = "2026-11-30T23:00:00Z"
    cache = PodCache()
    cache.replace([p for p in listed if is_ours(p, CODEC)])
    secrets = {"h100-a": "sa" * 10, "h100-b": "sb" * 10}
    records = {
        n: to_record(p, CODEC, secret=secrets.get(n, ""), agent_port=7070)
        for n, p in cache.pods.items()
    }
    assert set(records) == {"h100-a", "h100-b", "h100-c"}
    a, b, c = records["h100-a"], records["h100-b"], records["h100-c"]
    assert a.pool == "h100" and a.role is PodRole.ACTIVE and a.devices == ("GPU-aaaa",)
    assert a.annotations == {"state": "running", "owner": "alice", "job": "j1"}
    assert a.agent_url == "http://10.1.2.3:7070" and a.address == "10.1.2.3"
    assert a.secret == "sa" * 10 and a.alive and a.created_at == 1006.0
    assert b.role is PodRole.STANDBY and b.annotations["group"] == "h100-a"
    assert b.devices == ("GPU-aaaa",)
    assert not c.alive  # terminating: recovery deletes it
    assert c.annotations["hold_until"] == "99"


def test_relist_reports_pods_deleted_while_unwatched() -> None:
    cache = PodCache(clock=lambda: 5.0)
    cache.replace([running("a", rv="1"), running("b", rv="2")])
    changes = cache.replace([running("a", rv="1")])
    assert [(c.name, c.deleted, c.observed.phase) for c in changes] == [("b", True, Phase.LOST)]
    assert "b" in cache.gone


def test_a_list_older_than_our_own_create_does_not_lose_the_pod() -> None:
    cache = PodCache()
    cache.put(running("made-while-listing", rv="30"))  # our create's answer
    cache.put(running("patched", rv="31"))
    changes = cache.replace([running("patched", rv="20")], version="25")
    assert changes == []
    assert cache.pods["patched"]["metadata"]["resourceVersion"] == "31"
    assert "made-while-listing" in cache.pods
    # a list newer than the pod does say it is gone
    gone = cache.replace([], version="40")
    assert {c.name for c in gone} == {"made-while-listing", "patched"}


def test_watch_events_in_order_and_stale_ones_dropped() -> None:
    cache = PodCache()
    assert cache.apply("ADDED", pod("a", rv="10")) is not None
    change = cache.apply("MODIFIED", running("a", rv="12"))
    assert change is not None and change.observed.phase is Phase.READY
    assert cache.apply("MODIFIED", pod("a", rv="11")) is None  # older than what we hold
    gone = cache.apply("DELETED", running("a", rv="13"))
    assert gone is not None and gone.deleted and gone.observed.phase is Phase.LOST
    assert cache.apply("MODIFIED", running("a", rv="12")) is None  # replayed after delete
    assert "a" not in cache.pods


def test_own_answers_do_not_go_backwards() -> None:
    cache = PodCache()
    cache.apply("MODIFIED", running("a", rv="20"))
    cache.put(pod("a", rv="19"))
    assert cache.pods["a"]["metadata"]["resourceVersion"] == "20"


def backend_with(*pods: dict[str, Any]) -> KubernetesBackend:
    """A backend that has not connected: its cache holds listed pods (planning is pure)."""
    backend = KubernetesBackend(
        SETTINGS.model_copy(
            update={"templates": Templates(pools={"h100": PodTemplate(priority_class="warm")})}
        )
    )
    backend.cache.replace(list(pods))
    return backend


def test_standby_is_planned_beside_its_active_pod() -> None:
    backend = backend_with(created("h100-a", PodRole.ACTIVE, {}, devices=("GPU-aaaa",)))
    plan = backend._plan(PodCreate(pool=GPU, role=PodRole.STANDBY, group="h100-a", name="h100-s"))
    assert plan.node == "gpu-7" and plan.devices == ("GPU-aaaa",) and plan.group == "h100-a"
    assert plan.template.priority_class == "warm"
    by_card = backend._plan(PodCreate(pool=GPU, role=PodRole.STANDBY, devices=("GPU-aaaa",)))
    assert by_card.node == "gpu-7" and by_card.group == "h100-a"


def test_standby_without_a_live_active_pod_is_a_typed_error() -> None:
    backend = backend_with()
    with pytest.raises(ConfigError) as err:
        backend._plan(PodCreate(pool=GPU, role=PodRole.STANDBY, group="h100-zz"))
    assert err.value.field == "group"


def test_active_pod_may_not_choose_its_card() -> None:
    with pytest.raises(ConfigError) as err:
        backend_with()._plan(PodCreate(pool=GPU, devices=("GPU-1",)))
    assert err.value.field == "devices"


def test_duplicate_name_is_a_typed_error() -> None:
    backend = backend_with(created("h100-a", PodRole.ACTIVE, {}))
    with pytest.raises(ConfigError) as err:
        backend._plan(PodCreate(pool=GPU, name="h100-a"))
    assert err.value.field == "name"


def test_capabilities() -> None:
    caps = backend_with().capabilities
    assert caps.name == "kubernetes" and caps.durable_state and caps.shared_devices


def test_unreachable_cluster_is_a_typed_error(tmp_path: Any) -> None:
    """A kubeconfig that points nowhere (port 9 on loopback) fails as a BackendError."""
    from firepool.backends.kubernetes.errors import BackendError

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
    )
    backend = KubernetesBackend(
        KubernetesSettings(kubeconfig=str(kubeconfig), max_retries=1, backoff_base_s=0.01)
    )

    async def go() -> None:
        try:
            with pytest.raises(BackendError) as err:
                await asyncio.wait_for(backend.start(), 30)
            assert err.value.retryable and err.value.status is None
        finally:
            await backend.close()

    asyncio.run(go())


def test_missing_kubeconfig_is_a_config_error(tmp_path: Any) -> None:
    backend = KubernetesBackend(KubernetesSettings(kubeconfig=str(tmp_path / "nope")))

    async def go() -> None:
        try:
            with pytest.raises(ConfigError) as err:
                await backend.start()
            assert err.value.field == "kubeconfig"
        finally:
            await backend.close()

    asyncio.run(go())

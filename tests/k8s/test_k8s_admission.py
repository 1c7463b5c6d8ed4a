"""What the API server answers a create with, beyond success: our own committed create (409),
a full ResourceQuota and an enforced Pod Security level (both 403, neither an RBAC problem)."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes import spec as specs
from firepool.backends.kubernetes.errors import (
    PodConflictError,
    PodNotFoundError,
    PodSecurityError,
    ResourceQuotaError,
)
from firepool.backends.kubernetes.rest import Rest
from firepool.model import ErrorCode
from firepool.testing.api_faults import answers_lost
from firepool.testing.kwok import TEST_CPU_POOL, create_ready, rest_for, run_bounded

pytestmark = pytest.mark.k8s


def secret_exists(admin: Rest, namespace: str, pod: str) -> bool:
    try:
        admin.request(
            "GET", f"/api/v1/namespaces/{namespace}/secrets/{specs.secret_name(pod)}", "read"
        )
    except PodNotFoundError:
        return False
    return True


@pytest.mark.parametrize("lost", ["/pods", "/secrets"])
def test_a_create_whose_answer_was_lost_adopts_its_own_object(
    settings: KubernetesSettings, admin: Rest, namespace: str, lost: str
) -> None:
    """The POST committed, its answer never came, the retry got 409: the pod (or its Secret)
    is ours, so it is adopted; before, the clean-up deleted the live pod's Secret."""

    async def go() -> None:
        backend = KubernetesBackend(settings)
        try:
            await backend.start()
            with answers_lost("POST", lost) as answers:
                (name,) = await create_ready(backend, PodCreate(pool=TEST_CPU_POOL, name="adopt"))
            assert answers == [f"/api/v1/namespaces/{namespace}{lost}"]
            assert secret_exists(admin, namespace, name)
            record = await backend.get(name)
            assert record is not None and record.alive and record.secret
            # The Secret the pod mounts is the one the backend will authenticate with.
            found = await asyncio.to_thread(
                admin.request,
                "GET",
                f"/api/v1/namespaces/{namespace}/secrets/{specs.secret_name(name)}",
                "read",
            )
            value = base64.b64decode(found["data"][specs.SECRET_KEY]).decode()
            assert value == record.secret
        finally:
            await backend.delete_all()
            await backend.close()

    run_bounded(go)


def test_a_name_taken_by_someone_else_is_not_adopted(
    settings: KubernetesSettings, admin: Rest, namespace: str
) -> None:
    """409 for a pod another broker instance made: a conflict, and that pod is left alone."""
    other = settings.model_copy(update={"instance": "other"})

    async def go() -> None:
        theirs = KubernetesBackend(other)
        ours = KubernetesBackend(settings)
        try:
            await theirs.start()
            await ours.start()
            await create_ready(theirs, PodCreate(pool=TEST_CPU_POOL, name="taken"))
            with pytest.raises(PodConflictError) as err:
                await ours.create(PodCreate(pool=TEST_CPU_POOL, name="taken"))
            assert err.value.code is ErrorCode.CONFLICT
            assert secret_exists(admin, namespace, "taken")  # theirs, untouched
            assert (await theirs.get("taken")) is not None
        finally:
            await theirs.delete_all()
            await theirs.close()
            await ours.close()

    run_bounded(go)


def test_a_full_resource_quota_is_a_quota_error_and_leaves_no_secret(
    settings: KubernetesSettings, admin: Rest, namespace: str
) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "two-pods"},
        "spec": {"hard": {"pods": "1"}},
    }
    admin.request(
        "POST", f"/api/v1/namespaces/{namespace}/resourcequotas", "create quota", body=quota
    )
    _wait_quota_counted(admin, namespace)

    async def go() -> None:
        backend = KubernetesBackend(settings)
        try:
            await backend.start()
            await create_ready(backend, PodCreate(pool=TEST_CPU_POOL, name="fits"))
            with pytest.raises(ResourceQuotaError) as err:
                await backend.create(PodCreate(pool=TEST_CPU_POOL, name="over"))
            assert err.value.code is ErrorCode.QUOTA and not err.value.retryable
            assert "exceeded quota" in err.value.message and err.value.field == "pool"
            assert not secret_exists(admin, namespace, "over")
            assert await backend.get("over") is None
        finally:
            await backend.delete_all()
            await backend.close()

    run_bounded(go)


def _wait_quota_counted(admin: Rest, namespace: str) -> None:
    """The quota controller fills `status.hard` a moment after the create; until then the
    admission plugin lets everything through."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.request(
            "GET", f"/api/v1/namespaces/{namespace}/resourcequotas/two-pods", "read quota"
        )
        if (found.get("status") or {}).get("hard"):
            return
        time.sleep(0.1)
    raise AssertionError("the quota controller never counted the quota")


def test_the_restricted_pod_security_level_admits_our_pods_and_refuses_worse_typed(
    settings: KubernetesSettings, admin: Rest, namespace: str, broker_kubeconfig: str
) -> None:
    """Our pod spec meets `restricted`; a pod that does not gets a PodSecurityError (403 like
    missing RBAC, but a template problem, not a rights problem)."""
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    admin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}",
        "label namespace",
        body={"metadata": {"labels": labels}},
        content_type="application/merge-patch+json",
    )

    async def go() -> None:
        backend = KubernetesBackend(settings)
        try:
            await backend.start()
            await create_ready(backend, PodCreate(pool=TEST_CPU_POOL, name="restricted"))
        finally:
            await backend.delete_all()
            await backend.close()

    run_bounded(go)
    broker = rest_for(broker_kubeconfig)
    worse = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        },
    }
    try:
        with pytest.raises(PodSecurityError) as err:
            broker.request("POST", f"/api/v1/namespaces/{namespace}/pods", "create", body=worse)
    finally:
        broker.close()
    assert err.value.code is ErrorCode.CONFIG and "restricted" in err.value.message

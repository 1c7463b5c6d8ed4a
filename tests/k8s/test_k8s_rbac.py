"""The shipped Role against what the backend really does, on a real API server.

Every call of a scenario that walks each code path (start, create, the 409 adoption of a pod
and of a Secret, annotate, an unschedulable pod's events, delete, a restart) is recorded and
turned into (resource, verb). That set must equal the Role's rules: a verb the code uses and the
Role lacks is a 403 on a real cluster; a verb the Role grants and the code never uses is a right
a stolen token should not have. The API server's own authorizer then confirms, for the broker's
ServiceAccount, that the Role allows exactly that and nothing around it.
"""

from __future__ import annotations

import pytest
import yaml

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.errors import ForbiddenError, PodUnschedulableError
from firepool.backends.kubernetes.rest import Rest
from firepool.testing.api_faults import Call, answers_lost, recorded_calls
from firepool.testing.control import cpu_pool
from firepool.testing.kwok import DEPLOY_BASE, TEST_CPU_POOL, create_ready, rest_for, run_bounded

pytestmark = pytest.mark.k8s

HUGE = cpu_pool("huge", cpus_per_pod=10_000, memory_mib_per_pod=64)
_VERBS = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}


def rbac_of(call: Call, namespace: str) -> tuple[str, str]:
    """(resource, verb) as the API server's authorizer names a namespaced core call."""
    prefix = f"/api/v1/namespaces/{namespace}/"
    assert call.path.startswith(prefix), f"a call outside the namespace: {call}"
    parts = call.path[len(prefix) :].split("/")
    resource = parts[0] if len(parts) < 3 else f"{parts[0]}/{parts[2]}"
    if call.method == "GET":
        verb = "get" if len(parts) > 1 else ("watch" if call.watch else "list")
    else:
        verb = _VERBS[call.method]
    return resource, verb


def role_rules() -> set[tuple[str, str]]:
    role = yaml.safe_load((DEPLOY_BASE / "role.yaml").read_text())
    granted = set()
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""], "the broker needs only the core group"
        granted |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
    return granted


async def every_path(settings: KubernetesSettings) -> None:
    """One pass over every call the backend can make."""
    brief = settings.model_copy(update={"stalled_grace_s": 1.0})
    backend = KubernetesBackend(brief)
    try:
        await backend.start()  # list and watch pods, list Secrets
        with answers_lost("POST", "/pods"):  # the retry's 409 reads the pod back
            (adopted,) = await create_ready(backend, PodCreate(pool=TEST_CPU_POOL, name="a"))
        with answers_lost("POST", "/secrets"):  # ... and the Secret
            (other,) = await create_ready(backend, PodCreate(pool=TEST_CPU_POOL, name="b"))
        await backend.annotate(adopted, {"checked": "yes"})
        huge = await backend.create(PodCreate(pool=HUGE, name="huge"))
        with pytest.raises(PodUnschedulableError):  # its reason comes from the events
            await backend.wait_ready(huge.name, timeout=30)
        await backend.delete(huge.name)
        await backend.delete(other)
    finally:
        await backend.close()
    again = KubernetesBackend(brief)  # a restart reads back the pods and their Secrets
    try:
        await again.start()
        assert (await again.get(adopted)) is not None
    finally:
        await again.delete_all()
        await again.close()


def test_the_shipped_role_grants_exactly_the_calls_the_backend_makes(
    settings: KubernetesSettings, namespace: str
) -> None:
    with recorded_calls() as calls:
        run_bounded(lambda: every_path(settings), timeout=150)
    used = {rbac_of(c, namespace) for c in calls}
    granted = role_rules()
    assert used - granted == set(), "the code calls what the Role does not grant"
    assert granted - used == set(), "the Role grants what the code never calls"


def allowed(rest: Rest, namespace: str, resource: str, verb: str) -> bool:
    """The API server's answer for the caller, by SelfSubjectAccessReview."""
    name, _, sub = resource.partition("/")
    attributes = {"namespace": namespace, "verb": verb, "resource": name, "subresource": sub}
    answer = rest.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "review access",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    return bool(answer["status"].get("allowed"))


#: Rights next to the Role's that the broker must not have.
DENIED = [
    ("pods", "update"),
    ("pods", "deletecollection"),
    ("pods/exec", "create"),
    ("pods/log", "get"),
    ("pods/status", "patch"),
    ("secrets", "watch"),
    ("secrets", "update"),
    ("secrets", "patch"),
    ("serviceaccounts/token", "create"),
    ("roles", "create"),
    ("events", "create"),
    ("configmaps", "list"),
]


def test_the_broker_account_may_do_what_the_role_says_and_nothing_around_it(
    broker_kubeconfig: str, namespace: str
) -> None:
    broker = rest_for(broker_kubeconfig)
    try:
        for resource, verb in sorted(role_rules()):
            assert allowed(broker, namespace, resource, verb), (resource, verb)
            assert not allowed(broker, "default", resource, verb), ("default", resource, verb)
        for resource, verb in DENIED:
            assert not allowed(broker, namespace, resource, verb), (resource, verb)
        # Cluster-scoped rights: none.
        assert not allowed(broker, "", "nodes", "list")
        assert not allowed(broker, "", "namespaces", "create")
    finally:
        broker.close()


def test_a_call_outside_the_role_is_refused_by_the_server(
    broker_kubeconfig: str, namespace: str
) -> None:
    """The review above is the server's word, and so is this: the same token is refused, and
    the refusal is the typed RBAC error, not a quota or Pod Security one."""
    broker = rest_for(broker_kubeconfig)
    try:
        with pytest.raises(ForbiddenError):
            broker.request("GET", f"/api/v1/namespaces/{namespace}/configmaps", "list")
    finally:
        broker.close()

"""deploy/base/networkpolicies.yaml on the real API server: it admits them as written, and
their selectors pick the pods the backend makes. (Enforcing them is the CNI's job; the test
cluster has none, so this proves the objects and the labels meet, not the packets.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from firepool.backends.base import PodCreate
from firepool.backends.kubernetes import KubernetesBackend, KubernetesSettings
from firepool.backends.kubernetes.rest import Rest
from firepool.model import NetworkAccess
from firepool.testing.kwok import TEST_CPU_POOL, create_ready, run_bounded

pytestmark = pytest.mark.k8s

POLICIES = Path(__file__).resolve().parents[2] / "deploy/base/networkpolicies.yaml"


def selector(spec: dict[str, Any]) -> str:
    """A NetworkPolicy podSelector as a list's labelSelector."""
    picked = spec["podSelector"]
    terms = [f"{k}={v}" for k, v in (picked.get("matchLabels") or {}).items()]
    for expression in picked.get("matchExpressions") or []:
        if expression["operator"] == "Exists":
            terms.append(expression["key"])
        else:
            assert expression["operator"] == "NotIn", expression
            terms.append(f"{expression['key']} notin ({','.join(expression['values'])})")
    return ",".join(terms)


def test_the_policies_are_admitted_and_select_the_backends_pods(
    settings: KubernetesSettings, admin: Rest, namespace: str
) -> None:
    path = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
    shipped = [d for d in yaml.safe_load_all(POLICIES.read_text()) if d]
    for policy in shipped:
        made = admin.request("POST", path, "create networkpolicy", body=policy)
        assert made["spec"] == policy["spec"], policy["metadata"]["name"]

    async def go() -> None:
        backend = KubernetesBackend(settings)
        try:
            await backend.start()
            made = {}
            for network in NetworkAccess:
                pool = TEST_CPU_POOL.model_copy(update={"network": network})
                (made[network],) = await create_ready(
                    backend, PodCreate(pool=pool, name=f"np-{network.value}")
                )
            by_name = {p["metadata"]["name"]: p for p in shipped}

            async def picked(policy: str) -> set[NetworkAccess]:
                query = [("labelSelector", selector(by_name[policy]["spec"]))]
                listed = await asyncio.to_thread(
                    admin.request,
                    "GET",
                    f"/api/v1/namespaces/{namespace}/pods",
                    "list",
                    query=query,
                )
                names = {p["metadata"]["name"] for p in listed["items"]}
                return {network for network, name in made.items() if name in names}

            assert await picked("firepool-pods-isolated") == {
                NetworkAccess.NONE,
                NetworkAccess.EGRESS,
            }
            assert await picked("firepool-pods-egress") == {NetworkAccess.EGRESS}
        finally:
            await backend.delete_all()
            await backend.close()

    run_bounded(go)

"""Integration tests against a real API server (`make test-k8s`, FIREPOOL_TEST_KUBECONFIG).

The cluster needs kube-apiserver with etcd, kube-scheduler and kwok managing nodes that carry
`kwok.x-k8s.io/node=fake`; kube-controller-manager is not needed (pods are deleted with a zero
grace period in the tests, and each test namespace is cleaned by the tests themselves).
`make test` deselects this folder (marker `k8s`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from firepool.backends.kubernetes import KubernetesSettings
from firepool.backends.kubernetes.rest import Rest
from firepool.testing.kwok import (
    TEST_GPU_NODES,
    delete_namespace,
    ensure_namespace,
    ensure_node,
    ensure_service_account,
    kwok_node,
    rest_for,
)

CPU_NODES = [f"fp-test-cpu-{i}" for i in range(3)]


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    path = os.environ.get("FIREPOOL_TEST_KUBECONFIG")
    if not path:
        pytest.fail("set FIREPOOL_TEST_KUBECONFIG to a cluster's kubeconfig (see docs)")
    return path


@pytest.fixture(scope="session")
def admin(kubeconfig: str) -> Iterator[Rest]:
    rest = rest_for(kubeconfig)
    for name in CPU_NODES:
        ensure_node(rest, kwok_node(name))
    for name in TEST_GPU_NODES:
        ensure_node(rest, kwok_node(name, gpus=8, labels={"accelerator": "H100"}))
    yield rest
    rest.close()


@pytest.fixture
def namespace(admin: Rest) -> Iterator[str]:
    name = f"fp-test-{secrets.token_hex(3)}"
    ensure_namespace(admin, name)
    ensure_service_account(admin, name)
    yield name
    delete_namespace(admin, name)


@pytest.fixture
def settings(kubeconfig: str, namespace: str) -> KubernetesSettings:
    return KubernetesSettings(
        namespace=namespace,
        kubeconfig=kubeconfig,
        instance="test",
        agent_health=False,  # kwok pods run no process; readiness is the container's
        delete_grace_s=0,
        qps=100,
        burst=100,
    )

"""The Kubernetes backend's tests against a real control plane, run by `make test`.

By default the session starts its own (`firepool.testing.control_plane`: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok built from Go modules by tools/k8s/build.sh,
all on 127.0.0.1); FIREPOOL_TEST_KUBECONFIG points the suite at another cluster instead (its
kubeconfig must be cluster-admin: the fixtures make nodes and namespaces). With CI=true a
control plane that cannot be built or started fails the run; elsewhere it skips.

The backend under test never runs as admin: each test namespace gets the shipped
ServiceAccount, Role and RoleBinding (deploy/base), and the backend uses that account's token.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from firepool.backends.kubernetes import KubernetesSettings
from firepool.backends.kubernetes.rest import Rest
from firepool.testing.control_plane import (
    ControlPlane,
    ControlPlaneError,
    build_binaries,
    write_kubeconfig,
)
from firepool.testing.kubelet_node import KubeletNode, NodeError, build_node_binaries
from firepool.testing.kwok import (
    TEST_GPU_NODES,
    delete_namespace,
    ensure_namespace,
    ensure_node,
    ensure_service_account,
    grant_broker_role,
    kwok_node,
    rest_for,
)
from firepool.testing.node_cluster import POOL_IMAGE

CPU_NODES = [f"fp-test-cpu-{i}" for i in range(3)]



@dataclass(frozen=True)
class Cluster:
    """Where the tests' cluster is: its admin kubeconfig, and the plane if we started it."""

    kubeconfig: str
    plane: ControlPlane | None


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    given = os.environ.get("FIREPOOL_TEST_KUBECONFIG")
    if given:
        yield Cluster(given, None)
        return
    try:
        plane = ControlPlane(build_binaries()).start()
    except ControlPlaneError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the test control plane cannot run: {err}")
        pytest.skip(f"no test control plane: {err}")
    try:
        yield Cluster(str(plane.kubeconfig), plane)
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kubeconfig(cluster: Cluster) -> str:
    return cluster.kubeconfig


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
def broker_token(admin: Rest, namespace: str) -> str:
    """A token of the broker's ServiceAccount in `namespace`, bound to the shipped Role."""
    return grant_broker_role(admin, namespace)


@pytest.fixture
def broker_kubeconfig(admin: Rest, namespace: str, broker_token: str, tmp_path: Path) -> str:
    """A kubeconfig of the broker's ServiceAccount in `namespace`."""
    configuration = admin.api.configuration
    return str(
        write_kubeconfig(
            tmp_path / "broker.kubeconfig",
            configuration.host,
            Path(configuration.ssl_ca_cert),
            token=broker_token,
            namespace=namespace,
        )
    )


@pytest.fixture
def plane(cluster: Cluster) -> ControlPlane:
    """The suite's own control plane, for tests that restart or compact it."""
    if cluster.plane is None:
        pytest.skip("restarts and compacts the suite's own control plane, not a given cluster")
    return cluster.plane


@pytest.fixture
def settings(broker_kubeconfig: str, namespace: str) -> KubernetesSettings:
    return KubernetesSettings(
        namespace=namespace,
        kubeconfig=broker_kubeconfig,
        instance="test",
        agent_health=False,  # kwok pods run no process; readiness is the container's
        delete_grace_s=0,
        qps=100,
        burst=100,
    )


# ---------------------------------------------------------------------- the real node


@pytest.fixture(scope="session")
def pool_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pool base image as an OCI archive, built here (`firepool image build`)."""
    from firepool.image import build_pool_image

    archive = tmp_path_factory.mktemp("image") / "pool-base.oci.tar"
    build_pool_image(archive, name=POOL_IMAGE)
    return archive


@pytest.fixture(scope="session")
def real_node(cluster: Cluster, admin: Rest, pool_image: Path) -> Iterator[KubeletNode]:
    """One node with kubelet, containerd and runc in the suite's cluster, tainted so that only
    the tests that tolerate it place pods there, with the pool image imported."""
    if cluster.plane is None:
        pytest.skip("the real node joins the suite's own control plane, not a given cluster")
    try:
        node = KubeletNode(cluster.plane, build_node_binaries(), images=[pool_image]).start()
    except NodeError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the test node cannot run: {err}")
        pytest.skip(f"no real test node: {err}")
    try:
        yield node
    finally:
        node.stop()

"""The broker on the real test node: settings, catalog and a whole cluster for the benchmark.

The node tests (tests/k8s/test_k8s_node_*.py) and `bench warm-start --kubernetes` place pods
the same way: the pool image imported on the node, pods tolerating the node's taint and
selecting its label, the agents' health checked (a real process answers), and the broker
listening on the node's bridge address so that the agents' callbacks reach it.
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firepool.backends.kubernetes import KubernetesSettings
from firepool.backends.kubernetes.settings import PodTemplate, Templates, Toleration
from firepool.model import PoolSpec
from firepool.service.catalog import Catalog
from firepool.testing.control_plane import ControlPlane, build_binaries, write_kubeconfig
from firepool.testing.kubelet_node import NODE_LABEL, TAINT, KubeletNode, build_node_binaries
from firepool.testing.kwok import (
    delete_namespace,
    ensure_namespace,
    ensure_service_account,
    grant_broker_role,
    rest_for,
)

#: The name the pool image is imported under on the test node.
POOL_IMAGE = "docker.io/firepool/base:test"


def node_template() -> PodTemplate:
    """Pods on the real node; their image is their pool's (`node_pool`'s default)."""
    return PodTemplate(
        image_pull_policy="Never",  # no registry: the image was imported on the node
        node_selector={NODE_LABEL: "true"},
        tolerations=(Toleration(key=TAINT, operator="Exists", effect="NoSchedule"),),
    )


def node_settings(settings: KubernetesSettings, **changes: Any) -> KubernetesSettings:
    """`settings` with pods placed on the real node and their agents' health checked."""
    return settings.model_copy(
        update={"agent_health": True, "templates": Templates(defaults=node_template()), **changes}
    )


def node_pool(name: str = "cpu", **knobs: Any) -> PoolSpec:
    base: dict[str, Any] = {
        "image": POOL_IMAGE, "min_count": 1, "max_idle_count": 1, "max_count": 3,
        "memory_mib_per_pod": 256, "idle_timeout": 60.0, "step": 1,
    }  # fmt: skip
    base.update(knobs)
    return PoolSpec(name=name, **base)


def node_catalog(*pools: PoolSpec, budget: int = 3) -> Catalog:
    chosen = pools or (node_pool(),)
    return Catalog(chosen, {pool.name: budget for pool in chosen})


@dataclass(frozen=True)
class NodeCluster:
    plane: ControlPlane
    node: KubeletNode
    namespace: str
    #: The broker's settings in `namespace`, as the shipped Role's ServiceAccount.
    settings: KubernetesSettings


@contextlib.contextmanager
def running_node_cluster(image_archive: Path) -> Iterator[NodeCluster]:
    """A control plane with one real node (the image imported), a namespace with the shipped
    RBAC, and settings for a broker there. Everything is stopped and removed on exit."""
    with (
        tempfile.TemporaryDirectory(prefix="firepool-node-") as scratch,
        ControlPlane(build_binaries()) as plane,
        KubeletNode(plane, build_node_binaries(), images=[image_archive]) as node,
    ):
        admin = rest_for(str(plane.kubeconfig))
        namespace = f"fp-bench-{secrets.token_hex(3)}"
        try:
            ensure_namespace(admin, namespace)
            ensure_service_account(admin, namespace)
            token = grant_broker_role(admin, namespace)
            kubeconfig = write_kubeconfig(
                Path(scratch) / "broker.kubeconfig", plane.server, plane.ca.pair.cert,
                token=token, namespace=namespace,
            )  # fmt: skip
            cluster_settings = KubernetesSettings(
                namespace=namespace, kubeconfig=str(kubeconfig), instance="bench",
                delete_grace_s=0, qps=100, burst=100,
            )  # fmt: skip
            settings = node_settings(cluster_settings)
            yield NodeCluster(plane, node, namespace, settings)
        finally:
            with contextlib.suppress(Exception):
                delete_namespace(admin, namespace)
            admin.close()

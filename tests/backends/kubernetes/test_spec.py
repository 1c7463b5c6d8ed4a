"""Pod and Secret manifests for every pool shape, built from the catalog's PoolSpec."""

from __future__ import annotations

import json
from typing import Any

import pytest

from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.settings import KubernetesSettings, PodTemplate, Toleration
from firepool.backends.kubernetes.spec import (
    CONFIG_ENV,
    SECRET_ENV,
    PodPlan,
    build_pod,
    build_secret,
    check_name,
)
from firepool.model import ConfigError, PodRole, PoolSpec
from firepool.testing.control import cpu_pool, gpu_pool

SECRET = "s3cr3t-value-that-must-not-leak"
CPU = cpu_pool(cpus_per_pod=2, memory_mib_per_pod=4096)
GPU = gpu_pool("h100", accelerator="H100", standbys_per_active=1)
GANG = gpu_pool("h100x8", accelerator="H100", accelerators_per_pod=8, cpus_per_pod=96)


def plan(pool: PoolSpec, **kw: Any) -> PodPlan:
    values: dict[str, Any] = {
        "name": f"{pool.name}-abc",
        "pool": pool,
        "role": PodRole.ACTIVE,
        "secret": SECRET,
        "created_at": 1764543600.25,
        "annotations": {"state": "starting", "role": "active"},
        "template": PodTemplate(),
    }
    values.update(kw)
    return PodPlan(**values)


def build(p: PodPlan, settings: KubernetesSettings | None = None) -> dict[str, Any]:
    s = settings or KubernetesSettings(namespace="gpu-team")
    return build_pod(s, AnnotationCodec(s.prefix), p)


def container(pod: dict[str, Any]) -> dict[str, Any]:
    containers = pod["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def env(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(pod)["env"]}


def test_cpu_pod() -> None:
    pod = build(plan(CPU))
    c = container(pod)
    assert pod["metadata"]["namespace"] == "gpu-team"
    assert c["command"] == ["python", "-m", "firepool.agent", "--config-env", CONFIG_ENV]
    assert c["image"] == "firepool/base:latest"
    assert c["resources"] == {
        "requests": {"cpu": "2000m", "memory": "4096Mi"},
        "limits": {"cpu": "2000m", "memory": "4096Mi"},
    }
    assert "affinity" not in pod["spec"]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    labels = pod["metadata"]["labels"]
    assert labels["firepool.dev/pool"] == "cpu" and labels["firepool.dev/role"] == "active"
    assert labels["firepool.dev/instance"] == "firepool"
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["capabilities"] == {"drop": ["ALL"]}
    assert not sc["allowPrivilegeEscalation"]


def test_secret_never_in_clear() -> None:
    pod = build(plan(CPU))
    assert SECRET not in json.dumps(pod)
    assert env(pod)[SECRET_ENV] == {
        "secretKeyRef": {"name": "cpu-abc-agent", "key": "agent-secret"}
    }
    config = json.loads(env(pod)[CONFIG_ENV])
    assert "secret" not in config and config["pod"] == "cpu-abc"
    assert config["port"] == 7070 and config["host"] == "0.0.0.0"
    s = KubernetesSettings(namespace="gpu-team")
    secret = build_secret(s, AnnotationCodec(s.prefix), plan(CPU))
    assert secret["metadata"]["name"] == "cpu-abc-agent"
    assert secret["stringData"] == {"agent-secret": SECRET}
    assert secret["metadata"]["labels"]["firepool.dev/pod"] == "cpu-abc"


def test_gpu_active_requests_one_gpu() -> None:
    c = container(build(plan(GPU)))
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert "NVIDIA_VISIBLE_DEVICES" not in env(build(plan(GPU)))


def test_gpu_resource_name_is_configurable() -> None:
    settings = KubernetesSettings(gpu_resource="amd.com/gpu")
    c = container(build(plan(GPU), settings))
    assert c["resources"]["limits"]["amd.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in c["resources"]["limits"]


def test_standby_shares_its_active_pods_node_and_card() -> None:
    pod = build(
        plan(
            GPU,
            name="h100-sb",
            role=PodRole.STANDBY,
            devices=("GPU-1234-abcd",),
            node="gpu-node-7",
            group="h100-abc",
        )
    )
    c = container(pod)
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    assert "nvidia.com/gpu" not in c["resources"]["requests"]
    values = env(pod)
    assert values["NVIDIA_VISIBLE_DEVICES"] == "GPU-1234-abcd"
    assert values["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{80 * 1024}m"
    assert "CUDA_DEVICE_MEMORY_SHARED_CACHE" in values
    node_affinity = pod["spec"]["affinity"]["nodeAffinity"]
    terms = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-7"]}]}
    ]
    assert pod["metadata"]["labels"]["firepool.dev/role"] == "standby"
    assert pod["metadata"]["annotations"]["firepool.dev/group"] == "h100-abc"
    assert pod["metadata"]["annotations"]["firepool.dev/devices"] == "GPU-1234-abcd"
    assert json.loads(values[CONFIG_ENV])["devices"] == ["GPU-1234-abcd"]


def test_standby_without_card_or_node_is_a_typed_error() -> None:
    with pytest.raises(ConfigError) as err:
        build(plan(GPU, role=PodRole.STANDBY, node="n1"))
    assert err.value.field == "devices"
    with pytest.raises(ConfigError) as err:
        build(plan(GPU, role=PodRole.STANDBY, devices=("GPU-1",)))
    assert err.value.field == "group"


def test_custom_image_wins_over_template_and_pool() -> None:
    template = PodTemplate(image="registry.local/firepool/base:1.2")
    assert container(build(plan(CPU, template=template)))["image"] == template.image
    pinned = "registry.local/team/job@sha256:" + "a" * 64
    assert container(build(plan(CPU, template=template, image=pinned)))["image"] == pinned
    own = cpu_pool("cpu2", image="registry.local/own:3")
    assert container(build(plan(own)))["image"] == "registry.local/own:3"


def test_gang_rank_pod() -> None:
    """A multi-GPU rank: all its GPUs, the rendezvous port open, its IP known to its agent."""
    pod = build(plan(GANG, name="h100x8-r1"))
    c = container(pod)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert c["resources"]["requests"]["cpu"] == "96000m"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"agent": 7070, "rendezvous": 29500}
    assert env(pod)["FIREPOOL_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_template_placement_fields() -> None:
    template = PodTemplate(
        node_selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
        tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
        priority_class="firepool-warm",
        service_account="firepool-pod",
        env={"HF_HOME": "/cache/hf"},
        checkpoint_pvc="ckpt-rwx",
        image_pull_policy="IfNotPresent",
        labels={"team": "rl"},
        host_mounts=({"host_path": "/srv/models", "mount_path": "/models"},),
    )
    pod = build(plan(GPU, template=template))
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert spec["priorityClassName"] == "firepool-warm"
    assert spec["serviceAccountName"] == "firepool-pod"
    assert {"name": "host-0", "hostPath": {"path": "/srv/models", "type": "Directory"}} in spec[
        "volumes"
    ]
    assert {"name": "host-0", "mountPath": "/models", "readOnly": True} in spec["containers"][0][
        "volumeMounts"
    ]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt-rwx"}} in spec[
        "volumes"
    ]
    c = container(pod)
    assert {"name": "checkpoints", "mountPath": "/checkpoints"} in c["volumeMounts"]
    assert env(pod)["FIREPOOL_CHECKPOINT_ROOT"] == "/checkpoints"
    assert env(pod)["HF_HOME"] == "/cache/hf"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert pod["metadata"]["labels"]["team"] == "rl"


def test_annotations_are_encoded_on_the_pod() -> None:
    pod = build(plan(CPU, annotations={"owner": "alice", "hold_until": "12.5"}))
    ann = pod["metadata"]["annotations"]
    assert ann["b.firepool.dev/owner"] == "alice"
    assert ann["b.firepool.dev/hold_until"] == "12.5"
    assert ann["firepool.dev/created-at"] == "1764543600.25"
    assert ann["firepool.dev/template-version"] == "1"


@pytest.mark.parametrize("name", ["Upper", "a_b", "-x", "x" * 54, ""])
def test_bad_pod_names(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_name(name)
    assert err.value.field == "name"

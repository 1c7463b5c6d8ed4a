"""Pod and Secret manifests for one pod of a pool: pure functions of the request.

Plain JSON dicts, not `kubernetes.client` models: they are what goes on the wire, they are
cheap to build ten thousand times, and tests compare them directly.

- The agent's per-pod secret lives in a Secret of its own and reaches the container through
  `secretKeyRef`; the pod spec never holds it in clear. The rest of the agent's config is a
  plain JSON variable.
- An active GPU pod requests `<gpu_resource>: accelerators_per_pod`; the device plugin picks
  the card. A standby requests no GPU: it is pinned to its active pod's node (node affinity on
  `metadata.name`, so the scheduler still admits it) and card (`NVIDIA_VISIBLE_DEVICES` = the
  card's UUID) with HAMi-style memory limit variables, so a group never holds a second card.
- Jobs never talk to the API server: no service account token is mounted, and the container
  runs as a non-root user with every capability dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.settings import POD_MOUNT, KubernetesSettings, PodTemplate
from firepool.model import ACCELERATORS, ConfigError, PodRole, PoolSpec
from firepool.protocol import AgentConfig, IsolationMode

#: The agent reads its config from this variable and its secret from the next.
CONFIG_ENV = "FIREPOOL_AGENT_CONFIG"
SECRET_ENV = "FIREPOOL_AGENT_SECRET"
SECRET_KEY = "agent-secret"
#: Where the pod's workspace (an emptyDir) is mounted.
POD_DIR = POD_MOUNT
#: torchrun's rendezvous port on rank 0's pod.
RENDEZVOUS_PORT = 29500
RUN_AS_USER = 10001
#: Where the NVIDIA device plugin names the cards it gave a container.
DEVICE_PLUGIN_ENV = "NVIDIA_VISIBLE_DEVICES"

_POD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")


@dataclass(frozen=True)
class PodPlan:
    """What the backend knows when it builds one pod."""

    name: str
    pool: PoolSpec
    role: PodRole
    secret: str
    created_at: float
    annotations: dict[str, str]
    template: PodTemplate
    #: A standby's card(s) and the node of its active pod.
    devices: tuple[str, ...] = ()
    node: str | None = None
    group: str | None = None
    image: str | None = None
    callback_url: str | None = None


def check_name(name: str) -> str:
    """Pod names become DNS labels (and `<name>-agent` Secret names)."""
    if not _POD_NAME.match(name):
        raise ConfigError(
            f"pod name {name!r} must be lowercase letters, digits and '-', at most 53 long",
            field="name",
        )
    return name


def secret_name(pod: str) -> str:
    return f"{pod}-agent"


def labels(settings: KubernetesSettings, codec: AnnotationCodec, plan: PodPlan) -> dict[str, str]:
    return {
        **plan.template.labels,
        "app.kubernetes.io/managed-by": "firepool",
        codec.own("instance"): settings.instance,
        codec.own("pool"): plan.pool.name,
        codec.own("role"): plan.role.value,
        # deploy/base/networkpolicies.yaml selects on it: isolated unless `host`
        codec.own("network"): plan.pool.network.value,
    }


def selector(settings: KubernetesSettings, codec: AnnotationCodec) -> str:
    """The label selector of every pod (and Secret) this backend instance owns."""
    return f"{codec.own('instance')}={settings.instance}"


def build_secret(
    settings: KubernetesSettings, codec: AnnotationCodec, plan: PodPlan
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(plan.name),
            "namespace": settings.namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "firepool",
                codec.own("instance"): settings.instance,
                codec.own("pod"): plan.name,
            },
        },
        "type": "Opaque",
        "stringData": {SECRET_KEY: plan.secret},
    }


def _quantity_cpu(cores: float) -> str:
    return f"{max(1, round(cores * 1000))}m"


def _resources(settings: KubernetesSettings, plan: PodPlan) -> dict[str, Any]:
    pool = plan.pool
    amounts: dict[str, str] = {"cpu": _quantity_cpu(pool.cpus_per_pod)}
    if pool.memory_mib_per_pod:
        amounts["memory"] = f"{pool.memory_mib_per_pod}Mi"
    limits = dict(amounts)
    if pool.is_gpu and plan.role is PodRole.ACTIVE:
        # Extended resources: requests must equal limits, so both carry the count.
        limits[settings.gpu_resource] = str(pool.accelerators_per_pod)
        amounts[settings.gpu_resource] = str(pool.accelerators_per_pod)
    return {"requests": amounts, "limits": limits}


def _device_env(plan: PodPlan) -> list[dict[str, Any]]:
    """A standby's view of its active pod's card: the UUID and HAMi-core's memory cap."""
    if plan.role is not PodRole.STANDBY:
        return []
    if not plan.devices:
        raise ConfigError(f"standby {plan.name}: its active pod's card is unknown", field="devices")
    gib = ACCELERATORS.get(plan.pool.accelerator or "", 0)
    env = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": ",".join(plan.devices)},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
    ]
    for index in range(len(plan.devices)):
        env.append({"name": f"CUDA_DEVICE_MEMORY_LIMIT_{index}", "value": f"{gib * 1024}m"})
    env.append({"name": "CUDA_DEVICE_MEMORY_SHARED_CACHE", "value": f"{POD_DIR}/vgpu.cache"})
    return env


def agent_config(settings: KubernetesSettings, plan: PodPlan) -> dict[str, Any]:
    """The agent's config without its secret (that one comes from the Secret)."""
    config = AgentConfig(
        pod=plan.name,
        secret="0" * 16,  # placeholder to validate; dropped below
        pod_dir=POD_DIR,
        host="0.0.0.0",
        port=settings.agent_port,
        callback_url=plan.callback_url,
        isolation=IsolationMode.WEAK,  # the container is the boundary on Kubernetes
        container=True,
        preload_modules=plan.pool.preload_modules,
        memory_limit_mib=plan.pool.memory_mib_per_pod or None,
        devices=plan.devices,
        # An active GPU pod's card is the device plugin's choice, named in the container's
        # environment; the agent reads it there and reports it in its health.
        devices_from_env=(
            DEVICE_PLUGIN_ENV if plan.pool.is_gpu and plan.role is PodRole.ACTIVE else None
        ),
        device_memory_mib=(
            ACCELERATORS.get(plan.pool.accelerator or "", 0) * 1024 or None
            if plan.pool.is_gpu
            else None
        ),
    )
    data = config.model_dump(mode="json")
    del data["secret"]
    return data


def _affinity(plan: PodPlan) -> dict[str, Any] | None:
    if plan.role is not PodRole.STANDBY:
        return None
    if not plan.node:
        raise ConfigError(f"standby {plan.name}: its active pod has no node yet", field="group")
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [plan.node]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def build_pod(
    settings: KubernetesSettings, codec: AnnotationCodec, plan: PodPlan
) -> dict[str, Any]:
    template = plan.template
    pool = plan.pool
    env: list[dict[str, Any]] = [
        {"name": key, "value": value} for key, value in sorted(template.env.items())
    ]
    env += [
        {"name": CONFIG_ENV, "value": json.dumps(agent_config(settings, plan), sort_keys=True)},
        {
            "name": SECRET_ENV,
            "valueFrom": {"secretKeyRef": {"name": secret_name(plan.name), "key": SECRET_KEY}},
        },
        {"name": "FIREPOOL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "FIREPOOL_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    env += _device_env(plan)
    volumes: list[dict[str, Any]] = [{"name": "pod", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": "pod", "mountPath": POD_DIR}]
    if template.checkpoint_pvc:
        volumes.append(
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": template.checkpoint_pvc}}
        )
        mounts.append({"name": "checkpoints", "mountPath": template.checkpoint_mount})
        env.append({"name": "FIREPOOL_CHECKPOINT_ROOT", "value": template.checkpoint_mount})
    for i, mount in enumerate(template.host_mounts):
        name = f"host-{i}"
        volumes.append({"name": name, "hostPath": {"path": mount.host_path, "type": "Directory"}})
        mounts.append({"name": name, "mountPath": mount.mount_path, "readOnly": True})
    container: dict[str, Any] = {
        "name": "agent",
        "image": plan.image or template.image or pool.image,
        "command": ["python", "-m", "firepool.agent", "--config-env", CONFIG_ENV],
        "env": env,
        "ports": [
            {"name": "agent", "containerPort": settings.agent_port, "protocol": "TCP"},
            {"name": "rendezvous", "containerPort": RENDEZVOUS_PORT, "protocol": "TCP"},
        ],
        "resources": _resources(settings, plan),
        "volumeMounts": mounts,
        "readinessProbe": {
            "tcpSocket": {"port": settings.agent_port},
            "periodSeconds": 1,  # the broker asks the agent itself; this is for the cluster
            "failureThreshold": 3,
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if template.image_pull_policy:
        container["imagePullPolicy"] = template.image_pull_policy
    own = {
        codec.own("created-at"): repr(plan.created_at),
        codec.own("template-version"): str(pool.template_version),
        codec.own("devices"): ",".join(plan.devices),
    }
    if plan.group:
        own[codec.own("group")] = plan.group
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": settings.delete_grace_s,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": volumes,
    }
    if template.node_selector:
        spec["nodeSelector"] = dict(template.node_selector)
    if template.tolerations:
        spec["tolerations"] = [t.model_dump(exclude_none=True) for t in template.tolerations]
    if template.priority_class:
        spec["priorityClassName"] = template.priority_class
    if template.service_account:
        spec["serviceAccountName"] = template.service_account
    affinity = _affinity(plan)
    if affinity is not None:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": plan.name,
            "namespace": settings.namespace,
            "labels": labels(settings, codec, plan),
            "annotations": {**codec.encode(plan.annotations), **own},
        },
        "spec": spec,
    }

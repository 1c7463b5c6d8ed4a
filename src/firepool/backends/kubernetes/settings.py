"""What the Kubernetes backend is told: cluster-wide settings and per-pool pod templates.

The pool catalog (`PoolSpec`) stays backend-neutral: shape, image and scaling knobs. What only
a cluster needs (node selectors, tolerations, priority class, service account, a checkpoint
volume) lives in a separate templates file so that the same catalog runs on the local backend
unchanged. A typo in either is a `ConfigError` naming the field, never a silent default.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from firepool.backends.kubernetes.names import check_labels
from firepool.model import ConfigError, StrictModel

#: Where every pod's own directory is mounted (spec.POD_DIR); no other mount may go there.
POD_MOUNT = "/var/lib/firepool/pod"
#: Every label and annotation the backend writes starts with this (one DNS subdomain).
DEFAULT_PREFIX = "firepool.dev"

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_RESOURCE = r"^([a-z0-9.-]+/)?[a-zA-Z0-9][-a-zA-Z0-9_.]*$"


def _typed(cls_name: str, data: Any, handler: Any) -> Any:
    try:
        return handler(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise ConfigError(f"{cls_name}: {field}: {first['msg']}", field=field) from None


def _nested(model: type[StrictModel], value: Any, prefix: str) -> None:
    """Validate a nested entry first, so its error names the full path (`pools.h100.x`)."""
    if isinstance(value, model):
        return
    try:
        model.model_validate(value)
    except ConfigError as err:
        field = f"{prefix}.{err.field}" if err.field else prefix
        raise ConfigError(f"{field}: {err.message}", field=field) from None


class Toleration(StrictModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        return _typed("toleration", data, handler)


class HostMount(StrictModel):
    """A directory of the node in every pod of a pool (a model cache, a shared software tree),
    always read-only: a job must not leave anything there for the next caller's job."""

    host_path: Annotated[str, Field(min_length=2, max_length=4096, pattern=r"^/")]
    mount_path: Annotated[str, Field(min_length=2, max_length=4096, pattern=r"^/")]

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        return _typed("host mount", data, handler)


class PodTemplate(StrictModel):
    """Cluster placement of one pool's pods. Every field is optional; `defaults` in the
    templates file applies to pools without an entry (and under each entry's own fields)."""

    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    priority_class: Annotated[str, Field(pattern=_DNS_LABEL)] | None = None
    service_account: Annotated[str, Field(pattern=_DNS_LABEL)] | None = None
    #: Plain (non-secret) variables for the agent process; FIREPOOL_ names are the backend's.
    env: dict[str, str] = Field(default_factory=dict)
    #: A ReadWriteMany PVC mounted at `checkpoint_mount` for elastic jobs' checkpoints.
    checkpoint_pvc: Annotated[str, Field(pattern=_DNS_LABEL)] | None = None
    checkpoint_mount: str = "/checkpoints"
    #: Extra labels on every pod of the pool (cost centre, team).
    labels: dict[str, str] = Field(default_factory=dict)
    #: Read-only node directories mounted into every pod of the pool.
    host_mounts: tuple[HostMount, ...] = ()

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("tolerations"), list | tuple):
            for i, entry in enumerate(data["tolerations"]):
                _nested(Toleration, entry, f"tolerations.{i}")
        if isinstance(data, dict) and isinstance(data.get("host_mounts"), list | tuple):
            for i, entry in enumerate(data["host_mounts"]):
                _nested(HostMount, entry, f"host_mounts.{i}")
        return _typed("pod template", data, handler)

    @model_validator(mode="after")
    def _check(self) -> PodTemplate:
        for name in self.env:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ConfigError(f"pod template: env {name!r} is not a variable name", field="env")
            if name.upper().startswith("FIREPOOL_") or name.upper().startswith("NVIDIA_"):
                raise ConfigError(
                    f"pod template: env {name} is set by the backend", field=f"env.{name}"
                )
        check_labels(self.labels, "labels")
        check_labels(self.node_selector, "node_selector")
        mounts = [m.mount_path for m in self.host_mounts]
        reserved = {POD_MOUNT, self.checkpoint_mount}
        for i, path in enumerate(mounts):
            if path in reserved or mounts.index(path) != i:
                raise ConfigError(
                    f"pod template: host_mounts.{i}: {path} is already mounted",
                    field=f"host_mounts.{i}.mount_path",
                )
        if not self.checkpoint_mount.startswith("/"):
            raise ConfigError(
                "pod template: checkpoint_mount must be an absolute path", field="checkpoint_mount"
            )
        return self

    def under(self, base: PodTemplate) -> PodTemplate:
        """This template with `base` filling whatever it leaves unset (maps are merged)."""
        return PodTemplate(
            image=self.image or base.image,
            image_pull_policy=self.image_pull_policy or base.image_pull_policy,
            node_selector={**base.node_selector, **self.node_selector},
            tolerations=self.tolerations or base.tolerations,
            priority_class=self.priority_class or base.priority_class,
            service_account=self.service_account or base.service_account,
            env={**base.env, **self.env},
            checkpoint_pvc=self.checkpoint_pvc or base.checkpoint_pvc,
            checkpoint_mount=(
                self.checkpoint_mount
                if "checkpoint_mount" in self.model_fields_set
                else base.checkpoint_mount
            ),
            labels={**base.labels, **self.labels},
            host_mounts=self.host_mounts or base.host_mounts,
        )


class Templates(StrictModel):
    defaults: PodTemplate = Field(default_factory=PodTemplate)
    pools: dict[str, PodTemplate] = Field(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, dict):
            if "defaults" in data:
                _nested(PodTemplate, data["defaults"], "defaults")
            if isinstance(data.get("pools"), dict):
                for name, entry in data["pools"].items():
                    _nested(PodTemplate, entry, f"pools.{name}")
        return _typed("templates", data, handler)

    def for_pool(self, pool: str) -> PodTemplate:
        own = self.pools.get(pool)
        return self.defaults if own is None else own.under(self.defaults)


def load_templates(path: Path) -> Templates:
    """Read a templates file (YAML or TOML) with `defaults` and `pools.<name>` tables."""
    text = path.read_text()
    try:
        data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else tomllib.loads(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: not valid: {err}", field="templates") from None
    try:
        return Templates.model_validate(data or {})
    except ConfigError as err:
        raise ConfigError(f"{path}: {err.message}", field=err.field) from None


class KubernetesSettings(StrictModel):
    """Cluster-wide knobs of the backend (`firepool serve --backend kubernetes`)."""

    namespace: Annotated[str, Field(pattern=_DNS_LABEL)] = "default"
    #: None: in-cluster config when running in a pod, else the default kubeconfig.
    kubeconfig: str | None = None
    context: str | None = None
    #: Names this broker's pods apart from another broker's in the same namespace.
    instance: Annotated[str, Field(pattern=_DNS_LABEL)] = "firepool"
    prefix: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")] = (
        DEFAULT_PREFIX
    )
    #: Write calls per second: creates, deletes and patches of pods and of their Secrets, all
    #: through one token bucket (the paper's limiter is 100).
    qps: Annotated[float, Field(gt=0, le=100_000)] = 100.0
    burst: Annotated[int, Field(ge=1, le=100_000)] = 100
    #: Retries of one call on 429/5xx/transport errors, with exponential backoff.
    max_retries: Annotated[int, Field(ge=0, le=20)] = 6
    backoff_base_s: Annotated[float, Field(gt=0, le=60)] = 0.2
    backoff_max_s: Annotated[float, Field(gt=0, le=600)] = 10.0
    #: Worker threads for blocking API calls (the official client is synchronous).
    api_threads: Annotated[int, Field(ge=1, le=256)] = 16
    #: The extended resource an active GPU pod requests (one per accelerator).
    gpu_resource: Annotated[str, Field(pattern=_RESOURCE)] = "nvidia.com/gpu"
    agent_port: Annotated[int, Field(ge=1, le=65535)] = 7070
    #: Ready also needs the agent's /health (False only for simulated nodes such as kwok's,
    #: whose pods run no process).
    agent_health: bool = True
    #: Re-list after this long even if the watch is healthy (catches a silently dead stream).
    resync_s: Annotated[float, Field(gt=0)] = 300.0
    #: Server-side watch timeout; the stream is re-opened from the last resourceVersion.
    watch_timeout_s: Annotated[int, Field(ge=1, le=3600)] = 240
    #: Pods per page of a list (the first list and every relist), as client-go's reflectors
    #: page: decoding a page holds the GIL, about 55 ms for 500 pods on a slow core.
    list_page: Annotated[int, Field(ge=1, le=100_000)] = 500
    #: How long a pod may stay stalled (unschedulable, image not pulled, container not
    #: created) before it counts as failed; the scheduler and kubelet retry meanwhile, and the
    #: pod keeps its budget.
    stalled_grace_s: Annotated[float, Field(ge=0, le=3600)] = 120.0
    #: The pod watch's longest silence before its stream counts as dead, beyond the server's
    #: own timeout (a connection dropped without a FIN or RST says nothing otherwise).
    watch_silence_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    #: Pods seen deleted are remembered (for a late `wait_ready`) this long, at most
    #: `gone_limit` of them.
    gone_ttl_s: Annotated[float, Field(gt=0)] = 600.0
    gone_limit: Annotated[int, Field(ge=1)] = 10_000
    #: Grace period for a deleted pod's agent to kill its jobs.
    delete_grace_s: Annotated[int, Field(ge=0, le=3600)] = 10
    templates: Templates = Field(default_factory=Templates)

    @model_validator(mode="wrap")
    @classmethod
    def _typed_errors(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, dict) and "templates" in data:
            _nested(Templates, data["templates"], "templates")
        return _typed("kubernetes settings", data, handler)

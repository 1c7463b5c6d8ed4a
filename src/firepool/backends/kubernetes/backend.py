"""`KubernetesBackend`: the `PodBackend` protocol over one namespace of a cluster.

Every write (pod and Secret creates and deletes, annotation patches) goes through one token
bucket (settings.qps) and every call is retried on 429/5xx; pod state comes from one
list+watch (`watch.PodWatcher`) into a cache on the event loop, so `get`, `list_pods` and
`wait_ready` never poll the API server. Ready means the container is ready *and* the agent
answers its health check. A pod that can never get there (invalid image, OOM-killed, evicted,
deleted, node lost) ends `wait_ready` with a typed error at the first watch event that says
so; a stalled one (unschedulable, image not pulled yet, container not created yet) only once
it has stayed stalled for `stalled_grace_s`. The broker then deletes it and releases its
budget.

A create whose answer was lost and whose retry gets 409 adopts the pod (and Secret) its own
first try made, recognised by the plan's secret and creation stamp; a 409 from anything else
is a conflict, and the clean-up then removes only what this call made.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from firepool.backends.base import BackendCapabilities, BaseBackend, PodCreate, PodRecord
from firepool.backends.kubernetes import spec as specs
from firepool.backends.kubernetes.cache import Change, PodCache
from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.errors import (
    BackendError,
    ContainerConfigError,
    ImagePullError,
    PodConflictError,
    PodFailedError,
    PodNotFoundError,
    PodUnschedulableError,
)
from firepool.backends.kubernetes.names import check_pool_name
from firepool.backends.kubernetes.projection import project
from firepool.backends.kubernetes.ratelimit import TokenBucket, with_retries
from firepool.backends.kubernetes.records import is_ours, to_record
from firepool.backends.kubernetes.rest import Rest, load_configuration
from firepool.backends.kubernetes.settings import KubernetesSettings
from firepool.backends.kubernetes.status import Observed, Phase, observe
from firepool.backends.kubernetes.watch import PodWatcher
from firepool.model import ConfigError, FirepoolError, PodRole, PoolSpec
from firepool.protocol import Health, IsolationMode, MemoryLimitMode

log = logging.getLogger("firepool.backends.kubernetes")

T = TypeVar("T")


def _ready_error(name: str, seen: Observed, detail: str | None = None) -> BackendError:
    message = detail or seen.message
    text = f"pod {name}: {seen.reason or seen.phase.value}: {message}".rstrip(": ")
    if seen.phase is Phase.UNSCHEDULABLE:
        return PodUnschedulableError(text, field="pool")
    if seen.phase is Phase.IMAGE_FAILED:
        return ImagePullError(text, field="image")
    if seen.phase is Phase.CONFIG_FAILED:
        return ContainerConfigError(text, field="template")
    return PodFailedError(text)


def kept_pod(codec: AnnotationCodec) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """The watch's filter: pods carrying our pool label (the label selector asks the server
    for them; this decides), projected to what the cache keeps."""

    def keep(pod: dict[str, Any]) -> dict[str, Any] | None:
        return project(pod) if is_ours(pod, codec) else None

    return keep


class KubernetesBackend(BaseBackend):
    def __init__(
        self, settings: KubernetesSettings, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.codec = AnnotationCodec(settings.prefix)
        self.clock = clock
        self.cache = PodCache(gone_ttl_s=settings.gone_ttl_s, gone_limit=settings.gone_limit)
        #: Hooks for measurements: every cache change as the watch delivered it, and each pod
        #: create as it is sent (after pacing), by name.
        self.on_change: Callable[[Change], None] | None = None
        self.on_issue: Callable[[str], None] | None = None
        self._secrets: dict[str, str] = {}
        self._deleting: set[str] = set()
        self._created: set[str] = set()
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._bucket = TokenBucket(settings.qps, settings.burst)
        self._pool = ThreadPoolExecutor(settings.api_threads, thread_name_prefix="k8s-api")
        self._rest: Rest | None = None
        self._watch_rest: Rest | None = None
        self._watcher: PodWatcher | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_lock = asyncio.Lock()
        self._closed = False
        self._capabilities = BackendCapabilities(
            name="kubernetes",
            private_scratch=True,  # each pod is its own container
            device_discovery="device-plugin",
            shared_devices=True,  # standbys share their active pod's card
            durable_state=True,  # list_pods() reads the cluster
            memory_limit="container-limits",
            pods_on_this_host=False,
            agent_fence=None,  # a cluster's pods outlive the broker: its agents never fence
        )

    @property
    def capabilities(self) -> BackendCapabilities:
        return self._capabilities

    def check_pools(self, pools: Sequence[PoolSpec]) -> None:
        """Pool names the API would refuse as pod names or label values, and pools with no
        image from the catalog or the templates, fail here, before anything is served."""
        for pool in pools:
            check_pool_name(pool)
            template = self.settings.templates.for_pool(pool.name)
            if not (template.image or pool.image):
                raise ConfigError(
                    f"pool {pool.name}: no image (set `image` in the catalog or the pod "
                    "templates)",
                    field="image",
                )

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.settings.namespace}"

    # ------------------------------------------------------------------ start / stop

    async def start(self) -> None:
        """Connect, list, and start watching; idempotent. Every other call starts it."""
        if self._watcher is not None:
            return
        if self._closed:
            raise BackendError("the Kubernetes backend is closed")
        async with self._start_lock:
            if self._watcher is not None:
                return
            self._loop = asyncio.get_running_loop()
            s = self.settings
            configuration = await self._loop.run_in_executor(
                self._pool, load_configuration, s.kubeconfig, s.context, s.api_threads + 4
            )
            self._rest = Rest(configuration)
            self._watch_rest = Rest(configuration)
            await self._load_secrets()
            watcher = PodWatcher(
                self._watch_rest,
                s.namespace,
                specs.selector(s, self.codec),
                on_list=self._from_thread(self._on_list),
                on_event=self._from_thread(self._on_event),
                timeout_s=s.watch_timeout_s,
                resync_s=s.resync_s,
                page=s.list_page,
                silence_s=s.watch_silence_s,
                keep=kept_pod(self.codec),
            )
            # The first list is ours, so a cluster that refuses it fails start() with a typed
            # error instead of leaving callers waiting for a watch that never syncs.
            items, version = await self._call("list pods", watcher.list_all)
            self._on_list(items, version)
            self._watcher = watcher
            watcher.start(version)

    def _from_thread(self, handler: Callable[..., None]) -> Callable[..., None]:
        loop = self._loop
        assert loop is not None

        def forward(*args: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed under a stopping watch
                loop.call_soon_threadsafe(handler, *args)

        return forward

    async def close(self) -> None:
        """Stop watching and release connections; pods are left running (they stay warm).
        Final: a closed backend refuses further calls with a BackendError."""
        self._closed = True
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            await asyncio.get_running_loop().run_in_executor(None, watcher.stop)
        for rest in (self._rest, self._watch_rest):
            if rest is not None:
                rest.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def detach(self) -> None:
        """The watch thread and the API connections; the pods stay (see `close`)."""
        await self.close()

    async def delete_all(self) -> None:
        """Delete every pod of this instance (tests, `--delete-pods` on shutdown)."""
        await self.start()
        names = [n for n in self.cache.pods if n not in self._deleting]
        await asyncio.gather(*(self.delete(n) for n in names))

    # ------------------------------------------------------------------ events

    def _on_list(self, items: list[dict[str, Any]], version: str) -> None:
        for change in self.cache.replace(items, version):
            self._changed(change)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        change = self.cache.apply(kind, obj)
        if change is not None:
            self._changed(change)

    def _changed(self, change: Change) -> None:
        if change.deleted:
            self._deleting.discard(change.name)
        for waiter in self._waiters.get(change.name, ()):
            waiter.set()
        if self.on_change is not None:
            self.on_change(change)

    # ------------------------------------------------------------------ calls

    async def _call(self, what: str, fn: Callable[[], T], *, paced: bool = False) -> T:
        """A blocking API call on the pool, paced (creates, deletes) and retried."""
        loop = asyncio.get_running_loop()

        async def once() -> T:
            if paced:
                await self._bucket.acquire()
            return await loop.run_in_executor(self._pool, fn)

        s = self.settings
        return await with_retries(
            once, what, retries=s.max_retries, base=s.backoff_base_s, cap=s.backoff_max_s
        )

    def _rest_or_fail(self) -> Rest:
        if self._rest is None:
            raise BackendError("the Kubernetes backend is not started")
        return self._rest

    async def _load_secrets(self) -> None:
        rest = self._rest_or_fail()
        selector = specs.selector(self.settings, self.codec)
        answer = await self._call(
            "list secrets",
            lambda: rest.request(
                "GET", f"{self.path}/secrets", "list secrets", query=[("labelSelector", selector)]
            ),
        )
        for item in answer.get("items") or []:
            pod = ((item.get("metadata") or {}).get("labels") or {}).get(self.codec.own("pod"))
            value = (item.get("data") or {}).get(specs.SECRET_KEY)
            if pod and value:
                self._secrets[pod] = base64.b64decode(value).decode()

    # ------------------------------------------------------------------ create

    def _plan(self, request: PodCreate) -> specs.PodPlan:
        pool = request.pool
        name = specs.check_name(request.name or f"{pool.name}-{secrets.token_hex(4)}")
        if name in self.cache.pods or name in self._deleting:
            raise ConfigError(f"pod {name} already exists", field="name")
        devices: tuple[str, ...] = ()
        node: str | None = None
        group = request.group
        if request.role is PodRole.STANDBY:
            if not pool.is_gpu:
                raise ConfigError(f"pool {pool.name}: standbys need a GPU pool", field="role")
            active = self._active_for(request)
            if active is None:
                raise ConfigError(
                    f"standby {name}: no live active pod for group {request.group!r} "
                    f"or devices {request.devices}",
                    field="group",
                )
            group = (active.get("metadata") or {}).get("name")
            node = observe(active).node
            recorded = (active["metadata"].get("annotations") or {}).get(self.codec.own("devices"))
            devices = request.devices or tuple(d for d in (recorded or "").split(",") if d)
        elif request.devices:
            raise ConfigError(
                "an active pod's card is chosen by the device plugin, not the broker",
                field="devices",
            )
        return specs.PodPlan(
            name=name,
            pool=pool,
            role=request.role,
            secret=secrets.token_urlsafe(24),
            created_at=self.clock(),
            annotations=dict(request.annotations),
            template=self.settings.templates.for_pool(pool.name),
            devices=devices,
            node=node,
            group=group,
            image=request.image,
            callback_url=request.callback_url,
        )

    def _active_for(self, request: PodCreate) -> dict[str, Any] | None:
        if request.group is not None:
            pod = self.cache.pods.get(request.group)
            return pod if pod is not None and observe(pod).alive else None
        if request.devices:
            wanted = ",".join(request.devices)
            for pod in self.cache.pods.values():
                meta = pod.get("metadata") or {}
                role = (meta.get("labels") or {}).get(self.codec.own("role"))
                have = (meta.get("annotations") or {}).get(self.codec.own("devices"))
                if role == PodRole.ACTIVE.value and have == wanted and observe(pod).alive:
                    return pod
        return None

    async def create(self, request: PodCreate) -> PodRecord:
        await self.start()
        plan = self._plan(request)
        rest = self._rest_or_fail()
        secret_body = specs.build_secret(self.settings, self.codec, plan)
        pod_body = specs.build_pod(self.settings, self.codec, plan)
        self._created.add(plan.name)
        self._secrets[plan.name] = plan.secret
        secret_made = False
        try:
            await self._create_secret(rest, plan, secret_body)
            secret_made = True
            created = await self._create_pod(rest, plan, pod_body)
        except FirepoolError:
            self._created.discard(plan.name)
            self._secrets.pop(plan.name, None)
            if secret_made:
                with contextlib.suppress(FirepoolError):
                    await self._delete_secret(plan.name)
            raise
        self.cache.put(project(created))
        return self._record(created)

    async def _create_secret(
        self, rest: Rest, plan: specs.PodPlan, body: dict[str, Any]
    ) -> None:
        name = specs.secret_name(plan.name)
        try:
            await self._call(
                f"create secret of {plan.name}",
                lambda: rest.request("POST", f"{self.path}/secrets", "create secret", body=body),
                paced=True,
            )
        except PodConflictError:
            # Ours only if it holds this plan's fresh random secret: a retry of our own POST.
            found = await self._call(
                f"read secret {name}",
                lambda: rest.request("GET", f"{self.path}/secrets/{name}", "read secret"),
            )
            value = (found.get("data") or {}).get(specs.SECRET_KEY) or ""
            if base64.b64decode(value).decode(errors="replace") != plan.secret:
                raise PodConflictError(
                    f"secret {name} exists and is not this create's", field="name", status=409
                ) from None
            log.info("secret %s: adopted after a retried create", name)

    async def _create_pod(
        self, rest: Rest, plan: specs.PodPlan, body: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            return await self._call(
                f"create pod {plan.name}",
                lambda: self._post_pod(rest, plan.name, body),
                paced=True,
            )
        except PodConflictError:
            found = await self._call(
                f"read pod {plan.name}",
                lambda: rest.request("GET", f"{self.path}/pods/{plan.name}", "read pod"),
            )
            stamp = (body["metadata"].get("annotations") or {}).get(self.codec.own("created-at"))
            meta = found.get("metadata") or {}
            if not (
                is_ours(found, self.codec)
                and (meta.get("labels") or {}).get(self.codec.own("instance"))
                == self.settings.instance
                and (meta.get("annotations") or {}).get(self.codec.own("created-at")) == stamp
            ):
                raise
            log.info("pod %s: adopted after a retried create", plan.name)
            return found

    def _post_pod(self, rest: Rest, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.on_issue is not None:
            self.on_issue(name)
        return rest.request("POST", f"{self.path}/pods", "create pod", body=body)

    def _record(self, pod: dict[str, Any]) -> PodRecord:
        name = str((pod.get("metadata") or {}).get("name") or "")
        return to_record(
            pod,
            self.codec,
            secret=self._secrets.get(name, ""),
            agent_port=self.settings.agent_port,
            deleting=name in self._deleting,
        )

    # ------------------------------------------------------------------ ready

    async def _observed(self, name: str, deadline: float, running: bool = False) -> Observed:
        """Wait until the pod is ready (or, with `running`, its containers run) or will never
        be; raise for the latter. A stalled pod gets `stalled_grace_s` from the moment it is
        first seen stalled."""
        waiter = asyncio.Event()
        self._waiters.setdefault(name, set()).add(waiter)
        stalled_since: float | None = None
        try:
            while True:
                waiter.clear()
                pod = self.cache.pods.get(name)
                if pod is None:
                    gone = self.cache.gone.get(name)
                    if gone is not None or name in self._created:
                        raise _ready_error(name, gone or Observed(Phase.LOST, "Deleted"))
                    raise PodNotFoundError(f"pod {name} does not exist")
                seen = observe(pod)
                if seen.ip and (
                    seen.phase is Phase.READY or (running and seen.phase is Phase.STARTING)
                ):
                    return seen
                if seen.terminal:
                    raise _ready_error(name, seen)
                now = time.monotonic()
                left = deadline - now
                if seen.stalled:
                    stalled_since = now if stalled_since is None else stalled_since
                    grace_left = stalled_since + self.settings.stalled_grace_s - now
                    if grace_left <= 0:
                        raise _ready_error(name, seen, await self._stall_detail(name, seen))
                    left = min(left, grace_left)
                else:
                    stalled_since = None
                if deadline - now <= 0:
                    raise BackendError(
                        f"pod {name} not ready after the timeout "
                        f"({seen.phase.value}: {seen.reason or 'no reason given'})"
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wait(), left)
        finally:
            waiting = self._waiters.get(name)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._waiters[name]

    async def _stall_detail(self, name: str, seen: Observed) -> str | None:
        """Why a pod stayed unschedulable, in the scheduler's words: its latest
        FailedScheduling event (the pod's condition only keeps the first message)."""
        if seen.phase is not Phase.UNSCHEDULABLE:
            return None
        rest = self._rest_or_fail()
        selector = f"involvedObject.kind=Pod,involvedObject.name={name},reason=FailedScheduling"
        try:
            answer = await self._call(
                f"list events of {name}",
                lambda: rest.request(
                    "GET", f"{self.path}/events", "list events",
                    query=[("fieldSelector", selector)],
                ),
            )  # fmt: skip
        except BackendError as err:  # a Role without events: the condition's message will do
            log.debug("events of %s: %s", name, err.message)
            return None
        items = [e for e in answer.get("items") or [] if isinstance(e, dict)]
        if not items:
            return None
        latest = max(
            items,
            key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
        )
        return str(latest.get("message") or "") or None

    async def _check_alive(self, name: str) -> None:
        pod = self.cache.pods.get(name)
        seen = observe(pod) if pod is not None else self.cache.gone.get(name)
        if seen is None or seen.terminal:
            raise _ready_error(name, seen or Observed(Phase.LOST, "Deleted"))

    async def wait_ready(self, name: str, timeout: float = 60.0) -> Health:
        await self.start()
        deadline = time.monotonic() + timeout
        # With the agent's health to ask, its container running is enough: the kubelet's
        # readiness probe (a TCP check every `periodSeconds`) would add up to a period after
        # the agent listens. Without it (kwok), the Ready condition is the only answer.
        seen = await self._observed(name, deadline, running=self.settings.agent_health)
        if not self.settings.agent_health:
            return Health(
                pod=name,
                ok=True,
                ready=True,
                isolation=IsolationMode.WEAK,
                memory_limit=MemoryLimitMode.NONE,
                pid=0,
            )
        health = await super().wait_ready(name, max(0.1, deadline - time.monotonic()))
        record = await self.get(name)
        if (
            record is not None
            and record.role is PodRole.ACTIVE
            and health.devices
            and tuple(health.devices) != record.devices
        ):
            # The device plugin chose the card; remember it for standbys and recovery.
            await self._patch(name, {self.codec.own("devices"): ",".join(health.devices)})
        log.debug("pod %s ready on %s at %s", name, seen.node, seen.ip)
        return health

    # ------------------------------------------------------------------ read / annotate

    async def get(self, name: str) -> PodRecord | None:
        await self.start()
        pod = self.cache.pods.get(name)
        return None if pod is None else self._record(pod)

    async def list_pods(self) -> list[PodRecord]:
        await self.start()
        return [self._record(p) for p in self.cache.pods.values()]

    async def _patch(self, name: str, annotations: Mapping[str, str | None]) -> dict[str, Any]:
        rest = self._rest_or_fail()
        body = {"metadata": {"annotations": dict(annotations)}}
        answer = await self._call(
            f"annotate pod {name}",
            lambda: rest.request(
                "PATCH",
                f"{self.path}/pods/{name}",
                "annotate pod",
                body=body,
                content_type="application/merge-patch+json",
            ),
            paced=True,
        )
        self.cache.put(project(answer))
        return answer

    async def annotate(self, name: str, changes: Mapping[str, str | None]) -> PodRecord:
        await self.start()
        if name not in self.cache.pods:
            raise PodNotFoundError(f"pod {name} does not exist")
        answer = await self._patch(name, self.codec.patch(changes))
        return self._record(answer)

    # ------------------------------------------------------------------ delete

    async def _delete_secret(self, name: str) -> None:
        rest = self._rest_or_fail()
        with contextlib.suppress(PodNotFoundError):
            await self._call(
                f"delete secret of {name}",
                lambda: rest.request(
                    "DELETE", f"{self.path}/secrets/{specs.secret_name(name)}", "delete secret"
                ),
                paced=True,
            )

    async def delete(self, name: str) -> None:
        """Idempotent: a pod (or Secret) already gone is not an error."""
        await self.start()
        rest = self._rest_or_fail()
        self._deleting.add(name)
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": self.settings.delete_grace_s,
            "propagationPolicy": "Background",
        }
        try:
            await self._call(
                f"delete pod {name}",
                lambda: rest.request("DELETE", f"{self.path}/pods/{name}", "delete pod", body=body),
                paced=True,
            )
        except PodNotFoundError:
            self._deleting.discard(name)
        await self._delete_secret(name)
        self._secrets.pop(name, None)
        self._created.discard(name)

"""What every pod backend offers the service: the `PodBackend` Protocol and a base class.

Callers never ask *which* backend they hold (`if backend == "local"`): they read its
`capabilities` (can pods share a device for standbys? does `list_pods` survive a broker
restart? which memory limit mechanism? how long do its agents bear the broker's silence?)
and behave accordingly, the way dstack's backends advertise features instead of being
switched on by name.

A pod record is plain data: the agent URL and secret to talk to it, the devices it is bound
to, and free-form annotations (owner, hold, lease tag, queue, role...) the backend persists so
that a restarted broker rebuilds ownership and holds from `list_pods()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from firepool.backends.agent_client import AgentClient
from firepool.model import PodRole, PoolSpec, StrictModel, UnavailableError
from firepool.protocol import Health


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend can do; the service consults these instead of the backend's name."""

    name: str
    #: Pods get their own mount namespace with private /dev/shm and /tmp.
    private_scratch: bool
    #: How devices are found: "nvml", "fake" or "none".
    device_discovery: str
    #: Several pods may be pinned to one physical device (standbys).
    shared_devices: bool
    #: `list_pods()` finds pods created by an earlier broker process.
    durable_state: bool
    #: How the pool memory limit is enforced, as far as the backend can tell in advance.
    memory_limit: str
    #: The pods run on this host and reach the broker on its loopback (local processes). A
    #: cluster's pods do not: the broker must advertise an address they can reach.
    pods_on_this_host: bool = True
    #: How long the pods' agents bear their broker's silence before they end their pods and
    #: fence their attempts: seconds, "keep-alive" (each pool's keep-alive, at least
    #: `MIN_BROKER_SILENCE_S`), or None: never (the pods outlive any silence). The broker
    #: reads it through `broker_silence_s`, for its keep-alive pings and its lost window.
    agent_fence: float | Literal["keep-alive"] | None = None

    def broker_silence_s(self, pool: PoolSpec) -> float | None:
        """The silence a pod of `pool` bears (None: any). The one value both sides derive
        from: the agent's `AgentConfig.broker_silence_s` and the broker's lost window."""
        return silence_bound(self.agent_fence, pool)


#: A broker restart takes seconds; a pool's keep-alive shorter than this is not a silence bound.
MIN_BROKER_SILENCE_S = 30.0


def silence_bound(setting: float | str | None, pool: PoolSpec) -> float | None:
    """The agent's `broker_silence_s` for a pod of `pool` under a backend's `agent_fence`."""
    if setting is None:
        return None
    if setting == "keep-alive":
        return max(pool.idle_timeout, MIN_BROKER_SILENCE_S)
    return float(setting)


class PodCreate(StrictModel):
    pool: PoolSpec
    role: PodRole = PodRole.ACTIVE
    #: Pin to these devices (a standby shares its active's card); None = allocate free ones.
    devices: tuple[str, ...] | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    #: Where the agent pushes exit events (`protocol.ExitEvent`), None = only polled.
    callback_url: str | None = None
    name: str | None = None
    #: A standby's active pod (its group): the backend places the standby beside it.
    group: str | None = None
    #: The job's own image for a `custom_image` pod; None = the pool's image.
    image: str | None = None


class PodRecord(StrictModel):
    name: str
    pool: str
    role: PodRole
    agent_url: str
    secret: str
    devices: tuple[str, ...] = ()
    created_at: float
    template_version: int = 1
    pid: int = 0
    isolation: str = ""
    #: What its jobs reach over the network (`none`, `egress`, `host`: see PodNetwork);
    #: "" when not known.
    network: str = ""
    #: Whether the pod's jobs run in a PID namespace of their own (None: not known yet).
    pid_namespace: bool | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    #: False when the pod's process is gone (found on disk after a restart, or crashed).
    alive: bool = True
    #: Where other pods reach this one (torchrun's MASTER_ADDR is rank 0's address): the pod
    #: IP on Kubernetes, "" until it has one; loopback for local pods.
    address: str = "127.0.0.1"


@runtime_checkable
class PodBackend(Protocol):
    @property
    def capabilities(self) -> BackendCapabilities: ...

    async def create(self, request: PodCreate) -> PodRecord:
        """Start a pod; returns at once (the pod is STARTING). Await `wait_ready` next."""
        ...

    async def wait_ready(self, name: str, timeout: float = 60.0) -> Health:
        """Until the pod's agent answers healthy and its warm interpreter is up."""
        ...

    async def delete(self, name: str) -> None:
        """Stop every process of the pod and remove its workspace; idempotent."""
        ...

    async def list_pods(self) -> list[PodRecord]: ...

    async def get(self, name: str) -> PodRecord | None: ...

    async def annotate(self, name: str, changes: Mapping[str, str | None]) -> PodRecord:
        """Set (or, with None, remove) annotations, persisted before returning."""
        ...

    def agent(self, pod: PodRecord) -> AgentClient: ...

    def check_pools(self, pools: Sequence[PoolSpec]) -> None:
        """Refuse at start-up, with a ConfigError naming the pool, a catalog this backend
        could not make pods for (so an admitted job never queues for an impossible pod)."""
        ...

    async def detach(self) -> None:
        """The broker is stopping: release what this process holds (watches, connections,
        threads) and leave every pod as it is, so that a restarted broker finds them."""
        ...


class BaseBackend:
    """Shared behaviour: readiness by polling the agent's health."""

    def check_pools(self, pools: Sequence[PoolSpec]) -> None:
        """Every catalog will do unless the backend says otherwise."""

    async def detach(self) -> None:
        """Nothing held beyond the pods (the local backend's pods are its processes)."""

    async def get(self, name: str) -> PodRecord | None:
        raise NotImplementedError

    def agent(self, pod: PodRecord) -> AgentClient:
        return AgentClient(pod.agent_url, pod.secret)

    async def _check_alive(self, name: str) -> None:
        """Raise if the pod died while we waited for it (backends override)."""

    async def wait_ready(self, name: str, timeout: float = 60.0) -> Health:
        pod = await self.get(name)
        if pod is None:
            raise UnavailableError(f"pod {name} does not exist")
        deadline = time.monotonic() + timeout
        pause = 0.005
        async with self.agent(pod) as client:
            while True:
                await self._check_alive(name)
                try:
                    health = await client.health()
                    if health.ready and health.ok:
                        return health
                except UnavailableError:
                    pass
                if time.monotonic() > deadline:
                    raise UnavailableError(f"pod {name} not ready after {timeout:.0f}s")
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.1)

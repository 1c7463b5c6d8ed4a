"""Messages between the broker and the in-pod agent.

Both sides import this module and nothing else of each other, so the wire contract lives in one
place. Every request model rejects unknown fields (via `StrictModel`): an agent older or newer
than the broker fails loudly on a field it does not know instead of silently ignoring it.

Authentication: every agent endpoint takes `Authorization: Bearer <pod secret>`, a secret the
backend generates per pod. The agent pushes exit events to the callback URL it was given at
pod creation with the same header, so the broker can tell which pod is speaking.

HTTP surface of the agent (JSON bodies, errors as `{"error", "message", "field"}`):

    GET  /v1/health                              -> Health
    POST /v1/attempts            LaunchRequest   -> LaunchResponse
    GET  /v1/attempts/{attempt}                  -> AttemptStatus
    GET  /v1/attempts/{attempt}/logs?stream=stdout|stderr&offset=N&follow=0|1 -> bytes (chunked)
    POST /v1/attempts/{attempt}/stop StopRequest -> AttemptStatus (after the leader exited)
    POST /v1/reset                               -> ResetResult

Exit event, pushed as `POST <callback_url>` with body `ExitEvent` (retried with back-off until
the broker answers 2xx; the same facts stay readable through `GET /v1/attempts/{attempt}`).
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from firepool.model import (
    BadPackageError,
    ConflictError,
    ErrorCode,
    FirepoolError,
    ForbiddenEnvError,
    NotFoundError,
    PayloadTooLargeError,
    RequestValidationError,
    StrictModel,
    UnauthorizedError,
    UnavailableError,
    forbidden_env_reason,
    parse_attempt_id,
)

PROTOCOL_VERSION = 1

_DIGEST = r"^sha256:[0-9a-f]{64}$"
Digest = Annotated[str, Field(pattern=_DIGEST)]


def sha256_digest(data: bytes) -> str:
    """The digest format used for packages and requirements files: `sha256:<hex>`."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- errors


class LaunchFailedError(FirepoolError):
    """The attempt could not be started (bad argv, fetch failure, dirty pod...)."""

    code: ClassVar[ErrorCode] = ErrorCode.LAUNCH_FAILED


class DependencyInstallFailedError(FirepoolError):
    code: ClassVar[ErrorCode] = ErrorCode.DEPENDENCY_INSTALL_FAILED


#: Error class string -> exception type, so a client re-raises what the agent raised.
ERRORS_BY_CODE: dict[str, type[FirepoolError]] = {
    cls.code.value: cls
    for cls in (
        BadPackageError,
        ConflictError,
        ForbiddenEnvError,
        NotFoundError,
        PayloadTooLargeError,
        RequestValidationError,
        UnauthorizedError,
        UnavailableError,
        LaunchFailedError,
        DependencyInstallFailedError,
    )
}


def error_from_body(body: object, status: int) -> FirepoolError:
    """Rebuild the typed error an agent (or broker) sent as `{"error", "message", "field"}`."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        cls = ERRORS_BY_CODE.get(body["error"], FirepoolError)
        field = body.get("field")
        return cls(str(body.get("message", "")), field=field if isinstance(field, str) else None)
    return FirepoolError(f"agent answered HTTP {status}: {body!r}")


# --------------------------------------------------------------------------- launch


class PackageRef(StrictModel):
    """Where the agent fetches the job's code: streamed from the broker or a presigned URL."""

    digest: Digest
    url: Annotated[str, Field(min_length=1, max_length=8192)]
    #: Value of the Authorization header for the fetch, if the URL needs one.
    authorization: str | None = None


class RequirementsRef(StrictModel):
    """A requirements file carried inline; the digest names the install marker."""

    digest: Digest
    text: Annotated[str, Field(max_length=1_000_000)]

    @model_validator(mode="after")
    def _digest_matches(self) -> RequirementsRef:
        if sha256_digest(self.text.encode()) != self.digest:
            raise ValueError("requirements digest does not match its text")
        return self

    @classmethod
    def of(cls, text: str) -> RequirementsRef:
        return cls(digest=sha256_digest(text.encode()), text=text)


class LaunchRequest(StrictModel):
    """Start one attempt. Topology variables are injected by the executor and may set names a
    caller may not (RANK, MASTER_ADDR...); caller `env` is re-filtered by the agent."""

    attempt: Annotated[str, Field(min_length=3, max_length=300)]
    argv: Annotated[list[str], Field(min_length=1)]
    env: dict[str, str] = Field(default_factory=dict)
    topology_env: dict[str, str] = Field(default_factory=dict)
    package: PackageRef | None = None
    requirements: RequirementsRef | None = None
    timeout_s: Annotated[float, Field(gt=0)] | None = None
    #: Start Python entry points by forking the warm interpreter when the pod has one.
    warm: bool = True
    #: The broker asks for the exit (`GET /v1/attempts/{id}?wait_s=`) instead of having it
    #: pushed: the agent then sends no exit event, and keeps the exit until the pod's reset
    #: as it always does, so the broker's asking again (or its recovery's probe) finds it.
    awaits_exit: bool = False

    @model_validator(mode="after")
    def _check(self) -> LaunchRequest:
        parse_attempt_id(self.attempt)
        for name in self.env:
            reason = forbidden_env_reason(name)
            if reason is not None:
                raise ForbiddenEnvError(f"environment variable {name}: {reason}", field="env")
        return self


class LaunchMode(StrEnum):
    FORK = "fork"  # forked from the warm interpreter (zygote)
    EXEC = "exec"  # fork + exec of argv


class LaunchResponse(StrictModel):
    attempt: str
    pid: int
    mode: LaunchMode
    #: Wall-clock time (epoch seconds) the process was started.
    started_at: float
    #: Seconds spent fetching + unpacking the package and installing requirements.
    prepare_s: float = 0.0
    package_cached: bool = False
    requirements_cached: bool = False
    #: True when this attempt id was already launched: nothing new was started.
    duplicate: bool = False


# --------------------------------------------------------------------------- status / exit


class AttemptPhase(StrEnum):
    RUNNING = "running"
    EXITED = "exited"


class StopReason(StrEnum):
    STOP = "stop"  # the broker asked (cancel, resize, release)
    TIMEOUT = "timeout"  # the attempt's timeout_s passed
    SHUTDOWN = "shutdown"  # the agent itself is shutting down
    FAULT = "fault"  # an injected failure (experiments): SIGKILL at once, no chance to save


#: An attempt whose whole output (both streams) is at most this many bytes sends it with its
#: exit: most short jobs print a line or two, and fetching that over two log streams and an
#: acknowledgement cost the broker three more calls to the agent per job.
INLINE_OUTPUT_BYTES = 64 * 1024


class InlineOutput(StrictModel):
    """An exited attempt's complete output, from byte 0 of each stream (base64 in JSON:
    output is bytes, not text)."""

    model_config = ConfigDict(
        **StrictModel.model_config, ser_json_bytes="base64", val_json_bytes="base64"
    )

    stdout: bytes = b""
    stderr: bytes = b""

    def of(self, stream: str) -> bytes:
        return self.stdout if stream == "stdout" else self.stderr


class ExitEvent(StrictModel):
    """What the agent pushes when an attempt's leader process ends.

    `exit_code` is set when the process exited, `signal` when a signal killed it (then
    `exit_code` is None). `oom` is True when the memory limit killed it; `oom_source` says how
    that was decided: `cgroup` (the kernel's OOM counter for the attempt's cgroup rose) or
    `heuristic` (SIGKILL not sent by the agent with peak RSS near the limit, or a MemoryError
    under RLIMIT_AS). `stop_reason` is set when the agent itself signalled the process.
    """

    kind: Literal["exit"] = "exit"
    pod: str
    attempt: str
    exit_code: int | None
    signal: int | None = None
    oom: bool = False
    oom_source: Literal["cgroup", "heuristic"] | None = None
    stop_reason: StopReason | None = None
    runtime_s: float
    started_at: float
    finished_at: float
    max_rss_kib: int = 0
    #: The attempt's whole output when it is small (at most `INLINE_OUTPUT_BYTES`) and its
    #: streams had ended; otherwise None and the broker follows the log streams.
    output: InlineOutput | None = None


class AttemptStatus(StrictModel):
    attempt: str
    phase: AttemptPhase
    pid: int
    mode: LaunchMode
    started_at: float
    exit: ExitEvent | None = None


class StopRequest(StrictModel):
    grace_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    #: Fault injection: SIGKILL the whole tree at once, as a machine failure would.
    kill: bool = False


class LogAck(StrictModel):
    """The broker has stored each stream up to these byte offsets: the agent may drop them."""

    stdout: Annotated[int, Field(ge=0)] = 0
    stderr: Annotated[int, Field(ge=0)] = 0


class ResetRequest(StrictModel):
    #: How long the reset waits for the broker to acknowledge the exited attempt's output
    #: before removing it (0: not at all; what was not acknowledged is reported as lost).
    await_logs_s: Annotated[float, Field(ge=0, le=600)] = 0.0
    #: The broker stored the exited attempt's output up to these offsets (it came with the
    #: exit event): the acknowledgement rides on the reset instead of a call of its own.
    logs: LogAck | None = None


class LogAckResult(StrictModel):
    attempt: str
    acked: dict[str, int]
    #: The attempt exited and every byte of its output is acknowledged.
    complete: bool


# --------------------------------------------------------------------------- reset / health


class ResetResult(StrictModel):
    """`clean` is True only when every step was confirmed; otherwise `reason` says what was not,
    and the broker must delete the pod instead of reusing it."""

    clean: bool
    reason: str | None = None
    duration_ms: float
    killed: int = 0
    files_removed: int = 0
    #: Steps that ran, in order, with their cost in milliseconds (for the benchmark tables).
    steps_ms: dict[str, float] = Field(default_factory=dict)
    #: Per stream, bytes of the reset attempt's output the broker had not acknowledged when
    #: the reset removed them (empty when every byte was acknowledged): an output loss.
    logs_unacked: dict[str, int] = Field(default_factory=dict)


class IsolationMode(StrEnum):
    #: Own mount and IPC namespaces: fresh tmpfs on /tmp, /var/tmp and /dev/shm, other pods and
    #: the backend's state hidden; jobs run as the pod's own unprivileged uid.
    PRIVATE = "private"
    #: No namespace: the host's /tmp, /var/tmp, /dev/shm and SysV IPC are shared (reset sweeps
    #: what the pod's uid left there); for single-user machines only.
    WEAK = "weak"


class PodNetwork(StrEnum):
    """What network a pod's jobs get (see agent/netns.py). A pool asks for `none` or `egress`;
    `host` is what a pod without a network namespace of its own has (weak mode, or a backend
    with namespaces switched off): no network isolation at all."""

    #: A namespace of its own with only its loopback: nothing outside the pod is reachable.
    NONE = "none"
    #: Its own namespace plus a user-space NAT to public addresses (agent/egress.py); the
    #: host's loopback, its addresses and private ranges stay unreachable.
    EGRESS = "egress"
    #: The host's network, shared with every process of the host.
    HOST = "host"


class MemoryLimitMode(StrEnum):
    CGROUP2 = "cgroup2"
    CGROUP1 = "cgroup1"
    RLIMIT = "rlimit"  # RLIMIT_AS on each attempt's processes
    #: The pod's container and its runtime's cgroup (Kubernetes): the agent can neither make
    #: a cgroup there nor needs to; an address-space cap on top would refuse what fits (a
    #: CUDA context or torch's libraries map far more than they use).
    CONTAINER = "container"
    NONE = "none"


class Health(StrictModel):
    protocol: int = PROTOCOL_VERSION
    pod: str
    ok: bool
    ready: bool
    #: None when idle and clean; the current/last attempt otherwise.
    attempt: str | None = None
    dirty: bool = False
    unclean_reason: str | None = None
    isolation: IsolationMode
    network: PodNetwork = PodNetwork.HOST
    memory_limit: MemoryLimitMode
    process_tracking: list[str] = Field(default_factory=list)
    warm_modules: list[str] = Field(default_factory=list)
    devices: list[str] = Field(default_factory=list)
    pid: int
    #: The last reset detached the old scratch tmpfs; its pages are still being freed (the
    #: next launch waits for that). `last_scratch_release_ms` is how long the last release took.
    #: Other pods and the backend's state (pod secrets) are hidden from this pod's jobs.
    confined: bool = False
    #: The uid jobs run as (None: the agent's own, when it cannot change user).
    job_uid: int | None = None
    #: Per-pod limits and the mechanism enforcing each, e.g. {"pids": "cgroup1:256"}.
    limits: dict[str, str] = Field(default_factory=dict)
    scratch_releasing: bool = False
    last_scratch_release_ms: float = 0.0


# --------------------------------------------------------------------------- agent config


def silence_tick_s(broker_silence_s: float) -> float:
    """How often an agent checks its broker's silence (and its own stops)."""
    return min(max(broker_silence_s / 4, 0.05), 5.0)


def fenced_within_s(broker_silence_s: float) -> float:
    """The latest an agent has fenced its attempt after its last word from the broker: the
    bound plus one check. A broker declares a silent pod lost no sooner than this after its
    own last answer from the agent, so a partitioned agent fences before its attempt is run
    elsewhere; both windows come from the one setting."""
    return broker_silence_s + silence_tick_s(broker_silence_s) + 1.0


def allocated_devices(value: str) -> tuple[str, ...]:
    """The cards a device plugin gave a container, from its variable: a comma list of UUIDs.
    `all`, `none` and `void` name no card the broker could pin a standby to."""
    cards = tuple(part.strip() for part in value.split(",") if part.strip())
    return () if any(c.lower() in ("all", "none", "void") for c in cards) else cards


class AgentConfig(StrictModel):
    """Written by the backend to a 0600 file; the agent reads it at start. It never travels on
    the command line, so the secret does not show up in `ps`."""

    pod: str
    secret: Annotated[str, Field(min_length=16)]
    pod_dir: str
    #: The backend's directory of all pods (pod_dir's parent). In private mode the agent covers
    #: it in its namespace, so jobs see neither other pods nor the backend's state files.
    backend_root: str | None = None
    #: `NAME=VALUE` put into every job's environment; reset and delete find stray processes by
    #: it. Chosen by the backend so that it too can sweep the pod after a broker restart.
    marker: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{8,200}$")] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    callback_url: str | None = None
    isolation: IsolationMode = IsolationMode.WEAK
    #: The network the pool asks for; `host` when the backend gives no namespace. A private
    #: pod whose namespace cannot be made reports `host` in its health.
    network: PodNetwork = PodNetwork.HOST
    preload_modules: tuple[str, ...] = ()
    memory_limit_mib: int | None = None
    #: Size cap of the workspace tmpfs (private mode only; its pages count as pod memory).
    workspace_mib: int = 8192
    devices: tuple[str, ...] = ()
    #: Read `devices` at start from this variable when none are given: on Kubernetes the
    #: device plugin chooses an active pod's card and names it there (NVIDIA_VISIBLE_DEVICES).
    devices_from_env: str | None = None
    device_memory_mib: int | None = None
    #: Volumes emptied on every reset, and read-only caches that are kept.
    wipe_volumes: tuple[str, ...] = ()
    keep_caches: tuple[str, ...] = ()
    #: Upper bound for confirming every process is gone after SIGKILL.
    verify_timeout_s: float = 2.0
    #: An agent that has heard nothing from its broker for this long ends its pod (every
    #: process, then itself): a broker that will not come back leaves nothing running. None:
    #: never (the pod outlives any silence).
    broker_silence_s: Annotated[float, Field(gt=0)] | None = None
    #: Test hook: inject faults by name (`verify` makes every reset report unclean,
    #: `die-in-reset` kills the agent mid-reset, `die-at-start` before it serves,
    #: `slow-reset` makes every reset take `SLOW_RESET_S` longer).
    faults: tuple[str, ...] = ()
    extra_env: dict[str, str] = Field(default_factory=dict)
    #: The unprivileged uid/gid every job of this pod runs as (None: the agent's own).
    job_uid: Annotated[int, Field(ge=1)] | None = None
    job_gid: Annotated[int, Field(ge=1)] | None = None
    #: Paths covered with an empty read-only tmpfs in the pod's namespace (the broker's data
    #: directory, say); the pod's own directory stays visible.
    hide_paths: tuple[str, ...] = ()
    #: The pod is a container of its own (Kubernetes): its /tmp, /var/tmp, /dev/shm and IPC
    #: namespace are the pod's alone, and its jobs run under the agent's own uid. Reset then
    #: sweeps what that uid left there and every SysV and POSIX IPC object, as private mode
    #: does in the pod's namespaces.
    container: bool = False
    #: Host directories below which an attempt's `JobEnv.CHECKPOINT_DIR` may lie; the agent
    #: attaches that one directory to the pod for the attempt (the rest stays hidden).
    attach_roots: tuple[str, ...] = ()
    #: Bytes of each stream (stdout, stderr) of an attempt the pod keeps; past it, a marker
    #: line and the rest is dropped (`agent.output`).
    max_output_bytes: Annotated[int, Field(ge=1024)] = 64 << 20
    #: CPU quota in cores (cgroup cpu.max / cfs quota), process cap and open-file cap.
    cpu_quota: Annotated[float, Field(gt=0)] | None = None
    pids_max: Annotated[int, Field(ge=16)] | None = None
    nofile: Annotated[int, Field(ge=64)] | None = None


#: A `FIREPOOL_URL` naming a unix socket: a pod's relay to its broker (agent/broker_relay.py).
UNIX_URL_PREFIX = "unix:"


class JobEnv:
    """Variables the broker sets in an elastic attempt's environment (callers may not set any
    `FIREPOOL_` name, so a job can trust them). Rank and rendezvous come as torchrun's."""

    URL = "FIREPOOL_URL"  # where the job reports progress
    JOB_ID = "FIREPOOL_JOB_ID"
    ATTEMPT = "FIREPOOL_ATTEMPT"  # `<job-id>:<retry>`
    PROGRESS_TOKEN = "FIREPOOL_PROGRESS_TOKEN"  # good for this attempt's progress route only
    CHECKPOINT_DIR = "FIREPOOL_CHECKPOINT_DIR"  # the job's own, kept across attempts


class RayEnv:
    """Variables a `topology=ray` rank gets (besides RANK and WORLD_SIZE): the agent runs such
    a rank under `firepool.agent.ray_node`, which starts the rank's Ray node from them."""

    HEAD = "FIREPOOL_RAY_HEAD"  # host:port of the head's GCS (rank 0's pod)
    NODE_IP = "FIREPOOL_RAY_NODE_IP"  # this rank's pod address
    PORTS = "FIREPOOL_RAY_PORTS"  # JSON: this node's named ports and its worker port list

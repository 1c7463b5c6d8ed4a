"""Local pods: each pod is an agent process in its own session, workspace and scratch space.

Create writes the agent's config (0600, with the per-pod secret), opens the listening socket
itself and hands it to the agent, so the pod's URL is known at once and no port can be stolen,
then starts `python -m firepool.agent` in a new session, inside private mount and IPC
namespaces (`unshare --mount --ipc`) when the host permits (root). Probing which isolation the
host allows happens once per backend and is logged; where no namespace can be had, pods run in
an explicit, logged weaker mode (per-pod TMPDIR, shared /tmp, /var/tmp, /dev/shm and IPC).

Jobs never run as the broker's user: when the broker is root, each pod gets an unprivileged uid
of its own from a configurable range, claimed host-wide by an exclusive file in `uid_claims`
(so two brokers on one host never hand out the same uid), and released when the pod is deleted.
The agent (root) keeps what it needs to reset the pod; jobs cannot read other pods, the backend's
state, other processes' environments, or signal anything outside their pod.

Every pod has a state file (`<root>/.state/<pod>.pod.json`, 0600) holding its record: agent URL,
secret, devices and annotations (owner, hold...), whose changes go to a journal beside it
(`pod_state.py`). A new backend over the same root rebuilds its pods from these files and
checks each process is still the pod it claims to be (by the pod's environment marker), so a
restarted broker keeps its warm pods and their owner holds. State files and agent configs hold
pod secrets, so they live outside the pod directories, and in private mode each agent covers
the whole root in its namespace except its own pod directory: a job sees neither the secrets
nor any other pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from firepool.agent import isolation as iso
from firepool.agent import procfs
from firepool.agent.output import DEFAULT_MAX_BYTES
from firepool.agent.runtime import MARKER_VAR
from firepool.backends.base import (
    BackendCapabilities,
    BaseBackend,
    PodCreate,
    PodRecord,
    silence_bound,
)
from firepool.backends.gpus import discover
from firepool.backends.gpus import fake_devices as make_fake_devices
from firepool.backends.pod_state import PodStateFiles
from firepool.model import (
    ConfigError,
    NetworkAccess,
    PodRole,
    PoolSpec,
    UnavailableError,
    image_repository,
)
from firepool.protocol import AgentConfig, Health, IsolationMode, PodNetwork

log = logging.getLogger("firepool.backends.local")

IsolationChoice = Literal["auto", "private", "weak"]

#: Private mode needs real root: mount and IPC namespaces for the pod, and a uid of its own for
#: the jobs. A user namespace mapping only the broker's user would give jobs the agent's uid,
#: which is no boundary between a job and its agent's secret, so it is not offered as private.
_UNSHARE = ("unshare", "--mount", "--ipc", "--propagation", "private")
UID_KEY = "firepool.io/uid"
#: The agent's environment: what an interpreter and an installer need, nothing of the broker's
#: own (a broker's cloud credentials must not reach a pod through inheritance).
_AGENT_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "PYTHONHOME",
              "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CI")  # fmt: skip
_AGENT_ENV_PREFIXES = ("PIP_", "UV_", "CUDA_", "NVIDIA_")


def probe_unshare() -> tuple[str, ...] | None:
    """The unshare prefix this host permits (and under which tmpfs can be mounted), or None."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return None
    try:
        ok = subprocess.run(
            [*_UNSHARE, "sh", "-c", "mount -t tmpfs none /dev/shm"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return _UNSHARE if ok.returncode == 0 else None


def probe_netns() -> bool:
    """Whether this host gives a process a network namespace of its own (agent/netns.py)."""
    try:
        ok = subprocess.run(
            ["unshare", "--net", "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return ok.returncode == 0


def _uid_in_passwd(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


class LocalBackend(BaseBackend):
    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        isolation: IsolationChoice = "auto",
        fake_devices: Sequence[str] | None = None,
        fake_model: str = "fake",
        python: str = sys.executable,
        shutdown_grace_s: float = 5.0,
        verify_timeout_s: float = 2.0,
        agent_env: Mapping[str, str] | None = None,
        volumes: Mapping[str, bool] | None = None,
        faults: Sequence[str] = (),
        uid_base: int = 2_000_000,
        uid_count: int = 100_000,
        uid_claims: str | os.PathLike[str] = "/run/firepool/uids",
        hide_paths: Sequence[str | os.PathLike[str]] | None = None,
        attach_roots: Sequence[str | os.PathLike[str]] | None = None,
        pids_max: int | None = 4096,
        nofile: int | None = 65536,
        cpu_quota: bool = True,
        broker_silence_s: float | Literal["keep-alive"] | None = None,
        images: Mapping[str, str | os.PathLike[str]] | None = None,
        max_output_bytes: int = DEFAULT_MAX_BYTES,
        network_namespace: bool = True,
    ) -> None:
        """`volumes` maps a per-pod volume name to whether reset wipes it (True) or keeps it as
        a cache (False); each is `<pod>/volumes/<name>`, exported to jobs as
        `FIREPOOL_VOLUME_<NAME>`. `faults` is the agent's test hook (see AgentConfig).
        Jobs run as uids `uid_base .. uid_base + uid_count - 1` (one per pod, when the broker is
        root); `hide_paths` are invisible to jobs in private mode (default: the directory
        holding the backend root, i.e. the broker's data directory with its store, tokens and
        packages, unless that is shared, such as /var/tmp). An attempt's checkpoint directory
        (`JobEnv.CHECKPOINT_DIR`) is attached to its pod when it lies below one of
        `attach_roots` (default: `checkpoints` beside the backend root, the embedded broker's
        layout). `pids_max` and `nofile` cap each pod's processes and each process's open
        files; `cpu_quota` turns the pool's `cpus_per_pod` into a CFS quota. `images` says
        what a custom image is here: an image reference or repository -> an environment
        directory (a virtual environment, or any prefix with `bin/python` that can run
        `firepool.agent`); a custom-image pod's agent, and so its jobs, run on that
        interpreter. A pod keeps at most `max_output_bytes` of each stream of an attempt
        (`agent.output`). In private mode each pod's jobs get a network namespace of their
        own (loopback only, or the pool's `egress`); `network_namespace=False` gives them the
        host's network instead (no network isolation: for measuring what the namespace
        costs, and for hosts that refuse one)."""
        if uid_base < 1000 or uid_count < 1 or uid_base + uid_count > 2**32 - 2:
            raise ConfigError(
                f"uid range {uid_base}+{uid_count} must lie in 1000 .. 2^32-2", field="uid_base"
            )
        if isolation not in ("auto", "private", "weak"):
            raise ConfigError(
                f"isolation {isolation!r}: choose auto, private or weak", field="isolation"
            )
        # A pod needs its agent-side helpers and a job a few processes and descriptors.
        if pids_max is not None and pids_max < 16:
            raise ConfigError(f"pids_max {pids_max} is below 16", field="pids_max")
        if nofile is not None and nofile < 64:
            raise ConfigError(f"nofile {nofile} is below 64", field="nofile")
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # a job's user may pass through to its pod, never list pods
        self.state_dir = self.root / ".state"
        self.state_dir.mkdir(mode=0o700, exist_ok=True)
        self._state = PodStateFiles(self.state_dir)
        self.uid_range = range(uid_base, uid_base + uid_count)
        self.uid_claims = Path(uid_claims)
        parent = self.root.parent
        shared_parent = parent == Path("/") or bool(parent.stat().st_mode & 0o002)
        if hide_paths is None:
            hide_paths = [] if shared_parent else [parent]
        self.hide_paths = tuple(str(Path(p).resolve()) for p in hide_paths)
        if attach_roots is None:
            attach_roots = [] if shared_parent else [parent / "checkpoints"]
        for path in map(Path, attach_roots):
            path.mkdir(mode=0o711, parents=True, exist_ok=True)  # agents open it at start
        self.attach_roots = tuple(str(Path(p).resolve()) for p in attach_roots)
        self.pids_max = pids_max
        self.max_output_bytes = max_output_bytes
        self.nofile = nofile
        self.cpu_quota = cpu_quota
        if broker_silence_s not in (None, "keep-alive") and not (
            isinstance(broker_silence_s, int | float) and broker_silence_s > 0
        ):
            raise ConfigError(
                f"broker_silence_s {broker_silence_s!r}: seconds > 0, 'keep-alive' or None",
                field="broker_silence_s",
            )
        #: How long a pod's agent waits for word from its broker before ending the pod:
        #: "keep-alive" is the pool's keep-alive (idle_timeout), None never.
        self.broker_silence_s = broker_silence_s
        #: Every uid this backend gave a pod (leftover checks look for processes of these).
        self.uids_handed_out: set[int] = set()
        self.python = python
        self.images = {ref: Path(where) for ref, where in (images or {}).items()}
        self.shutdown_grace_s = shutdown_grace_s
        self.verify_timeout_s = verify_timeout_s
        self.agent_env = dict(agent_env or {})
        self.faults = tuple(faults)
        self.volumes = dict(volumes or {})
        for vol in self.volumes:
            if not vol.replace("_", "").isalnum():
                raise ConfigError(f"volume name {vol!r} must be alphanumeric", field="volumes")
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._records: dict[str, PodRecord] = {}
        self._deleting: dict[str, PodRecord] = {}
        self._lock = asyncio.Lock()
        if fake_devices is not None:
            self.devices, discovery = make_fake_devices(fake_devices, fake_model), "fake"
        else:
            self.devices, discovery = discover()
        self._unshare: tuple[str, ...] | None = None
        if isolation != "weak":
            self._unshare = probe_unshare()
            if self._unshare is None and isolation == "private":
                raise ConfigError(
                    "private pod isolation needs root and mount/IPC namespaces (unshare)",
                    field="isolation",
                )
        self._netns = False
        if self._unshare is not None and network_namespace:
            self._netns = probe_netns()
            if not self._netns and isolation == "private":
                raise ConfigError(
                    "private pod isolation needs network namespaces (unshare --net); pass "
                    "network_namespace=False to share the host's network",
                    field="network_namespace",
                )
            if not self._netns:
                log.warning("no network namespaces here: pods share the host's network")
        mode = (
            "private (mount+IPC" + ("+network" if self._netns else "") + " namespaces, per-pod uid)"
            if self._unshare
            else "weak (shared /tmp, /var/tmp, /dev/shm, IPC)"
        )
        log.info("local backend at %s: isolation %s, devices %s via %s",
                 self.root, mode, [d.uuid for d in self.devices], discovery)  # fmt: skip
        self._isolation_reported = False
        self._capabilities = BackendCapabilities(
            name="local",
            private_scratch=self._unshare is not None,
            device_discovery=discovery,
            shared_devices=True,
            durable_state=True,
            memory_limit="cgroup-or-rlimit",
            agent_fence=broker_silence_s,  # its agents' config, written at each create
        )
        self._load()

    @property
    def capabilities(self) -> BackendCapabilities:
        return self._capabilities

    @property
    def isolation(self) -> IsolationMode:
        return IsolationMode.PRIVATE if self._unshare else IsolationMode.WEAK

    # ------------------------------------------------------------------ state files

    def _config_file(self, name: str) -> Path:
        return self.state_dir / f"{name}.agent.json"

    def _save(self, record: PodRecord) -> None:
        self._state.save(record)
        self._records[record.name] = record

    def _load(self) -> None:
        for record in self._state.load():
            self._records[record.name] = record.model_copy(update={"alive": self._alive(record)})

    # ------------------------------------------------------------------ uids

    @property
    def _own_uids(self) -> bool:
        return os.geteuid() == 0

    def _claim_uid(self, name: str) -> int | None:
        """The lowest uid of the range no live pod of any broker on this host holds."""
        if not self._own_uids:
            return None
        self.uid_claims.mkdir(mode=0o700, parents=True, exist_ok=True)
        pods = [*self._records.values(), *self._deleting.values()]
        used = {int(r.annotations[UID_KEY]) for r in pods if UID_KEY in r.annotations}
        for uid in self.uid_range:
            if uid in used or _uid_in_passwd(uid):
                continue
            claim = self.uid_claims / str(uid)
            for _ in range(2):
                try:
                    fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:
                    if not self._stale_claim(claim):
                        break
                    with contextlib.suppress(FileNotFoundError):
                        claim.unlink()
                    continue
                with os.fdopen(fd, "w") as fh:
                    fh.write(f"{self.root}\n{name}\n")
                self.uids_handed_out.add(uid)
                return uid
        raise UnavailableError(f"no free job uid in {self.uid_range}")

    @staticmethod
    def _stale_claim(claim: Path) -> bool:
        """A claim whose pod has no state file any more (deleted, or its backend root removed)
        and that is not brand new (its pod may be being created right now)."""
        try:
            root, name = claim.read_text().split("\n")[:2]
            age = time.time() - claim.stat().st_mtime
        except (OSError, ValueError):
            return False
        return age > 60 and not (Path(root) / ".state" / f"{name}.pod.json").exists()

    def _release_uid(self, uid: str | None, name: str) -> None:
        if uid is None:
            return
        claim = self.uid_claims / uid
        with contextlib.suppress(OSError, ValueError):
            if claim.read_text().split("\n")[:2] == [str(self.root), name]:
                claim.unlink()

    def _marker(self, record: PodRecord) -> bytes:
        return f"{MARKER_VAR}={record.annotations.get('firepool.io/marker', '')}".encode()

    def _alive(self, record: PodRecord) -> bool:
        """The pid runs and is still this pod's agent (not a recycled pid)."""
        proc = self._procs.get(record.name)
        if proc is not None:
            return proc.poll() is None
        return procfs.alive(record.pid) and procfs.environ_has(record.pid, self._marker(record))

    # ------------------------------------------------------------------ devices

    def _allocate(self, req: PodCreate) -> tuple[tuple[str, ...], int | None]:
        pool = req.pool
        if not pool.is_gpu:
            return (), None
        by_uuid = {d.uuid: d for d in self.devices}
        if req.devices is not None:
            unknown = [u for u in req.devices if u not in by_uuid]
            if unknown:
                raise ConfigError(f"unknown devices {unknown}", field="devices")
            chosen = [by_uuid[u] for u in req.devices]
        else:
            pods = [*self._records.values(), *self._deleting.values()]
            busy = {u for r in pods if r.role is PodRole.ACTIVE for u in r.devices}
            free = [d for d in self.devices if d.model == pool.accelerator and d.uuid not in busy]
            if len(free) < pool.accelerators_per_pod:
                raise UnavailableError(
                    f"pool {pool.name}: {len(free)} free {pool.accelerator} devices, "
                    f"{pool.accelerators_per_pod} needed"
                )
            chosen = free[: pool.accelerators_per_pod]
        return tuple(d.uuid for d in chosen), min(d.memory_mib for d in chosen)

    # ------------------------------------------------------------------ create

    def environment(self, image: str) -> Path:
        """The environment directory of a custom image: the entry for the exact reference,
        else for its repository, else for the nearest parent path of the repository."""
        candidates = [image]
        repository = image_repository(image)
        while repository:
            candidates.append(repository)
            repository = repository.rpartition("/")[0]
        for ref in candidates:
            where = self.images.get(ref)
            if where is not None:
                return where
        raise ConfigError(
            f"image {image!r} has no environment directory on the local backend "
            "(add it to the catalog's [local_images])",
            field="image",
        )

    def check_pools(self, pools: Sequence[PoolSpec]) -> None:
        """Every image a pool admits must have an environment here: refused at start-up, so
        an admitted job never queues for a pod this backend cannot make."""
        for pool in pools:
            for entry in pool.allowed_images:
                try:
                    where = self.environment(entry.rstrip("/"))
                except ConfigError as err:
                    message = f"pool {pool.name}: {err.message}"
                    raise ConfigError(message, field="local_images") from None
                if not (where / "bin" / "python").exists():
                    raise ConfigError(
                        f"pool {pool.name}: image {entry!r}: {where} has no bin/python",
                        field="local_images",
                    )

    async def create(self, request: PodCreate) -> PodRecord:
        async with self._lock:
            return self._create(request)

    def _create(self, req: PodCreate) -> PodRecord:
        pool = req.pool
        name = req.name or f"{pool.name}-{secrets.token_hex(4)}"
        if name.startswith(".") or "/" in name:
            raise ConfigError(f"bad pod name {name!r}", field="name")
        if name in self._records or name in self._deleting:
            raise ConfigError(f"pod {name} already exists", field="name")
        devices, device_mib = self._allocate(req)
        uid = self._claim_uid(name)
        try:
            return self._start(req, name, devices, device_mib, uid)
        except BaseException:
            if uid is not None:
                self._release_uid(str(uid), name)
            raise

    def _start(
        self,
        req: PodCreate,
        name: str,
        devices: tuple[str, ...],
        device_mib: int | None,
        uid: int | None,
    ) -> PodRecord:
        pool = req.pool
        python = self.python
        if self._netns and pool.network is NetworkAccess.EGRESS and not shutil.which("slirp4netns"):
            raise ConfigError(  # checked first, like the image: a refusal leaves nothing behind
                f"pool {pool.name}: network egress needs slirp4netns (Debian package "
                "slirp4netns) on this host",
                field="network",
            )
        if req.image is not None:  # resolved first: an unknown image leaves nothing behind
            python = str(self.environment(req.image) / "bin" / "python")
        pod_dir = self.root / name
        pod_dir.mkdir(mode=0o700)
        secret = secrets.token_urlsafe(24)
        marker = f"{name}.{secrets.token_hex(8)}"
        volume_env: dict[str, str] = {}
        for vol in self.volumes:
            path = pod_dir / "volumes" / vol
            path.mkdir(parents=True)
            if uid is not None:
                os.chmod(pod_dir / "volumes", 0o711)
                os.chown(path, uid, uid)
                os.chmod(path, 0o700)
            volume_env[f"FIREPOOL_VOLUME_{vol.upper()}"] = str(path)
        config = AgentConfig(
            pod=name,
            secret=secret,
            pod_dir=str(pod_dir),
            backend_root=str(self.root),
            marker=marker,
            callback_url=req.callback_url,
            isolation=self.isolation,
            network=PodNetwork(pool.network.value) if self._netns else PodNetwork.HOST,
            preload_modules=pool.preload_modules,
            memory_limit_mib=pool.memory_mib_per_pod or None,
            devices=devices,
            device_memory_mib=device_mib,
            verify_timeout_s=self.verify_timeout_s,
            faults=self.faults,
            wipe_volumes=tuple(
                volume_env[f"FIREPOOL_VOLUME_{v.upper()}"]
                for v, wipe in self.volumes.items()
                if wipe
            ),
            keep_caches=tuple(
                volume_env[f"FIREPOOL_VOLUME_{v.upper()}"]
                for v, wipe in self.volumes.items()
                if not wipe
            ),
            extra_env=volume_env,
            job_uid=uid,
            job_gid=uid,
            hide_paths=self.hide_paths,
            attach_roots=self.attach_roots,
            cpu_quota=pool.cpus_per_pod if self.cpu_quota and pool.cpus_per_pod > 0 else None,
            broker_silence_s=silence_bound(self.broker_silence_s, pool),
            max_output_bytes=self.max_output_bytes,
            pids_max=self.pids_max,
            nofile=self.nofile,
        )
        config_path = self._config_file(name)
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(config.model_dump_json())
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        cmd = [python, "-m", "firepool.agent", "--config", str(config_path),
               "--listen-fd", str(listener.fileno())]  # fmt: skip
        if self._unshare:
            cmd = [*self._unshare, *cmd]
        env = {k: v for k, v in os.environ.items()
               if k in _AGENT_ENV or k.startswith(_AGENT_ENV_PREFIXES)}  # fmt: skip
        env.update(self.agent_env)
        env[MARKER_VAR] = marker
        log_fd = os.open(pod_dir / "agent.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(log_fd, "ab") as logf:
            proc = subprocess.Popen(
                cmd,
                pass_fds=[listener.fileno()],
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=pod_dir,
            )
        listener.close()
        self._procs[name] = proc
        record = PodRecord(
            name=name,
            pool=pool.name,
            role=req.role,
            agent_url=f"http://127.0.0.1:{port}",
            secret=secret,
            devices=devices,
            created_at=time.time(),
            template_version=pool.template_version,
            pid=proc.pid,
            isolation=self.isolation.value,
            network=config.network.value,
            annotations={
                **req.annotations,
                "firepool.io/marker": marker,
                **({UID_KEY: str(uid)} if uid is not None else {}),
            },
        )
        self._save(record)
        return record

    async def _check_alive(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            tail = (self.root / name / "agent.log").read_bytes()[-2000:].decode(errors="replace")
            raise UnavailableError(f"agent of pod {name} exited with {proc.returncode}: {tail}")

    async def wait_ready(self, name: str, timeout: float = 60.0) -> Health:
        health = await super().wait_ready(name, timeout)
        record = self._records[name]
        facts: dict[str, object] = {}
        if health.isolation.value != record.isolation:
            # Said once per backend: every pod of a host gets the same answer.
            level = logging.INFO if self._isolation_reported else logging.WARNING
            self._isolation_reported = True
            log.log(level, "pod %s runs with isolation %s (asked for %s)",
                    name, health.isolation.value, record.isolation)  # fmt: skip
            facts["isolation"] = health.isolation.value
        if health.network.value != record.network:
            facts["network"] = health.network.value
        pid_namespace = health.limits.get("pid") == "namespace"
        if record.pid_namespace != pid_namespace:
            facts["pid_namespace"] = pid_namespace
        if facts:
            async with self._lock:
                self._save(self._records[name].model_copy(update=facts))
        return health

    # ------------------------------------------------------------------ read / annotate

    async def get(self, name: str) -> PodRecord | None:
        record = self._records.get(name)
        if record is None:
            return None
        return record.model_copy(update={"alive": self._alive(record)})

    async def list_pods(self) -> list[PodRecord]:
        return [r.model_copy(update={"alive": self._alive(r)}) for r in self._records.values()]

    async def annotate(self, name: str, changes: Mapping[str, str | None]) -> PodRecord:
        async with self._lock:
            record = self._records.get(name)
            if record is None:
                raise UnavailableError(f"pod {name} does not exist")
            annotations = dict(record.annotations)
            for key, value in changes.items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            updated = record.model_copy(update={"annotations": annotations})
            self._state.save_annotations(updated)
            self._records[name] = updated
            return updated

    # ------------------------------------------------------------------ delete

    async def delete(self, name: str) -> None:
        """Idempotent. Other creates and deletes proceed while this one waits for the agent;
        the pod's devices stay reserved until its processes are gone. If any process of the
        pod survives, the pod stays (its record, uid and devices too) and this raises
        `UnavailableError`: a later delete tries again."""
        async with self._lock:
            record = self._records.pop(name, None)
            if record is None:
                return
            self._deleting[name] = record
        try:
            await asyncio.to_thread(self._delete_sync, record)
        except BaseException:
            async with self._lock:
                self._records.setdefault(name, record)
            raise
        finally:
            async with self._lock:
                self._deleting.pop(name, None)

    def _delete_sync(self, record: PodRecord) -> None:
        proc = self._procs.get(record.name)
        ours = proc is not None or self._alive(record)
        if ours:
            procfs.kill_quietly(record.pid, signal.SIGTERM)
            deadline = time.monotonic() + self.shutdown_grace_s
            while time.monotonic() < deadline and procfs.alive(record.pid):
                if proc is not None and proc.poll() is not None:
                    break
                time.sleep(0.005)
        pod_dir = self.root / record.name
        survivors = self._sweep(record, pid_is_ours=ours)
        if survivors:
            raise UnavailableError(
                f"pod {record.name}: processes {survivors[:10]} survive deletion; kept the pod",
                field="name",
            )
        self._procs.pop(record.name, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        uid = record.annotations.get(UID_KEY)
        if uid is not None and record.isolation != "private":
            # No namespace held the pod's files and IPC objects: find them by owner.
            iso.sweep_owned(int(uid), [*iso.SCRATCH_DIRS, *iso.shared_writable()])
            iso.remove_sysv(iso.sysv_objects(int(uid)))
            queues = iso.open_mqueues()
            if queues is not None:
                try:
                    iso.remove_mqueues(queues, iso.mqueues(queues, int(uid)))
                finally:
                    os.close(queues)
        for line in _read_lines(pod_dir / "agent.cgroups"):
            with contextlib.suppress(OSError):
                Path(line).rmdir()
        shutil.rmtree(pod_dir, ignore_errors=True)
        self._state.remove(record.name)
        with contextlib.suppress(FileNotFoundError):
            self._config_file(record.name).unlink()
        self._release_uid(record.annotations.get(UID_KEY), record.name)

    def _sweep(self, record: PodRecord, pid_is_ours: bool) -> list[int]:
        """SIGKILL whatever is left of the pod: its tree, its cgroup ledger, its marker, its
        uid. Returns the processes still alive when the bounded wait ends."""
        marker = self._marker(record)
        uid = int(record.annotations[UID_KEY]) if UID_KEY in record.annotations else None
        cgroup_dirs = _read_lines(self.root / record.name / "agent.cgroups")
        ledgers = [Path(p) / "cgroup.procs" for p in cgroup_dirs]
        deadline = time.monotonic() + max(self.verify_timeout_s, 2.0)
        me = os.getpid()
        while True:
            procs = procfs.snapshot()
            targets = procfs.descendants(procs, [record.pid]) if pid_is_ours else set()
            if pid_is_ours and record.pid in procs:
                targets.add(record.pid)
            for ledger in ledgers:
                with contextlib.suppress(OSError, ValueError):
                    targets.update(int(x) for x in ledger.read_text().split())
            for p in procs.values():
                if p.pid == me or p.dead or p.pid in targets:
                    continue
                if procfs.environ_has(p.pid, marker) or (
                    uid is not None and procfs.real_uid(p.pid) == uid
                ):
                    targets.add(p.pid)
            live = [p for p in targets if p in procs and not procs[p].dead]
            if not live:
                return []
            if time.monotonic() > deadline:
                log.error("pod %s: processes %s survive deletion", record.name, live)
                return live
            for pid in live:
                procfs.kill_quietly(pid, signal.SIGSTOP)  # freeze first: no more forks
            for pid in live:
                procfs.kill_quietly(pid)
            time.sleep(0.005)

    async def close(self) -> None:
        """Delete every pod this backend knows (tests, `firepool serve` shutdown)."""
        for name in list(self._records):
            await self.delete(name)


def _read_lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line]
    except OSError:
        return []

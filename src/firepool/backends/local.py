"""Local pods: each pod is an agent process in its own session, workspace and scratch space.

Create writes the agent's config (0600, with the per-pod secret), opens the listening socket
itself and hands it to the agent, so the pod's URL is known at once and no port can be stolen,
then starts `python -m firepool.agent` in a new session, inside a private mount namespace
(`unshare --mount`) when the kernel permits. Probing which isolation the host allows happens
once per backend and is logged; where no namespace can be had, pods run in an explicit, logged
weaker mode (per-pod TMPDIR, shared /dev/shm).

Every pod has a state file (`<root>/.state/<pod>.pod.json`, 0600) holding its record: agent URL,
secret, devices and annotations (owner, hold...). A new backend over the same root rebuilds its
pods from these files and checks each process is still the pod it claims to be (by the pod's
environment marker), so a restarted broker keeps its warm pods and their owner holds. State
files and agent configs hold pod secrets, so they live outside the pod directories, and in
private mode each agent covers the whole root in its namespace except its own pod directory:
a job sees neither the secrets nor any other pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
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

from firepool.agent import procfs
from firepool.agent.runtime import MARKER_VAR
from firepool.backends.base import BackendCapabilities, BaseBackend, PodCreate, PodRecord
from firepool.backends.gpus import discover
from firepool.backends.gpus import fake_devices as make_fake_devices
from firepool.model import ConfigError, PodRole, UnavailableError
from firepool.protocol import AgentConfig, Health, IsolationMode

log = logging.getLogger("firepool.backends.local")

IsolationChoice = Literal["auto", "private", "weak"]

_UNSHARE_VARIANTS: tuple[tuple[str, ...], ...] = (
    ("unshare", "--mount", "--propagation", "private"),
    ("unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"),
)


def probe_unshare() -> tuple[str, ...] | None:
    """The unshare prefix this host permits (and under which tmpfs can be mounted), or None."""
    if shutil.which("unshare") is None:
        return None
    for prefix in _UNSHARE_VARIANTS:
        try:
            ok = subprocess.run(
                [*prefix, "sh", "-c", "mount -t tmpfs none /dev/shm"],
                capture_output=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if ok.returncode == 0:
            return prefix
    return None


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
    ) -> None:
        """`volumes` maps a per-pod volume name to whether reset wipes it (True) or keeps it as
        a cache (False); each is `<pod>/volumes/<name>`, exported to jobs as
        `FIREPOOL_VOLUME_<NAME>`. `faults` is the agent's test hook (see AgentConfig)."""
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.state_dir = self.root / ".state"
        self.state_dir.mkdir(mode=0o700, exist_ok=True)
        self.python = python
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
                raise ConfigError("private pod isolation requested but unshare is not permitted")
        mode = "private (mount namespace)" if self._unshare else "weak (shared /dev/shm, /tmp)"
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
        )
        self._load()

    @property
    def capabilities(self) -> BackendCapabilities:
        return self._capabilities

    @property
    def isolation(self) -> IsolationMode:
        return IsolationMode.PRIVATE if self._unshare else IsolationMode.WEAK

    # ------------------------------------------------------------------ state files

    def _state_file(self, name: str) -> Path:
        return self.state_dir / f"{name}.pod.json"

    def _config_file(self, name: str) -> Path:
        return self.state_dir / f"{name}.agent.json"

    def _save(self, record: PodRecord) -> None:
        path = self._state_file(record.name)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(record.model_dump_json(indent=1))
        os.replace(tmp, path)
        self._records[record.name] = record

    def _load(self) -> None:
        for path in sorted(self.state_dir.glob("*.pod.json")):
            try:
                record = PodRecord.model_validate_json(path.read_text())
            except (OSError, ValueError) as exc:
                log.error("unreadable pod state %s: %s", path, exc)
                continue
            self._records[record.name] = record.model_copy(update={"alive": self._alive(record)})

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
        pod_dir = self.root / name
        pod_dir.mkdir(mode=0o700)
        secret = secrets.token_urlsafe(24)
        marker = f"{name}.{secrets.token_hex(8)}"
        volume_env: dict[str, str] = {}
        for vol in self.volumes:
            path = pod_dir / "volumes" / vol
            path.mkdir(parents=True)
            volume_env[f"FIREPOOL_VOLUME_{vol.upper()}"] = str(path)
        config = AgentConfig(
            pod=name,
            secret=secret,
            pod_dir=str(pod_dir),
            backend_root=str(self.root),
            marker=marker,
            callback_url=req.callback_url,
            isolation=self.isolation,
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
        cmd = [self.python, "-m", "firepool.agent", "--config", str(config_path),
               "--listen-fd", str(listener.fileno())]  # fmt: skip
        if self._unshare:
            cmd = [*self._unshare, *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FIREPOOL_")}
        env.update(self.agent_env)
        env[MARKER_VAR] = marker
        with open(pod_dir / "agent.log", "ab") as logf:
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
            annotations={**req.annotations, "firepool.io/marker": marker},
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
        if health.isolation.value != record.isolation:
            # Said once per backend: every pod of a host gets the same answer.
            level = logging.INFO if self._isolation_reported else logging.WARNING
            self._isolation_reported = True
            log.log(level, "pod %s runs with isolation %s (asked for %s)",
                    name, health.isolation.value, record.isolation)  # fmt: skip
            async with self._lock:
                self._save(record.model_copy(update={"isolation": health.isolation.value}))
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
            self._save(updated)
            return updated

    # ------------------------------------------------------------------ delete

    async def delete(self, name: str) -> None:
        """Idempotent. Other creates and deletes proceed while this one waits for the agent;
        the pod's devices stay reserved until its processes are gone."""
        async with self._lock:
            record = self._records.pop(name, None)
            if record is None:
                return
            self._deleting[name] = record
        try:
            await asyncio.to_thread(self._delete_sync, record)
        finally:
            async with self._lock:
                self._deleting.pop(name, None)

    def _delete_sync(self, record: PodRecord) -> None:
        proc = self._procs.pop(record.name, None)
        ours = proc is not None or self._alive(record)
        if ours:
            procfs.kill_quietly(record.pid, signal.SIGTERM)
            deadline = time.monotonic() + self.shutdown_grace_s
            while time.monotonic() < deadline and procfs.alive(record.pid):
                if proc is not None and proc.poll() is not None:
                    break
                time.sleep(0.005)
        pod_dir = self.root / record.name
        self._sweep(record, pid_is_ours=ours)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        for line in _read_lines(pod_dir / "agent.cgroups"):
            with contextlib.suppress(OSError):
                Path(line).rmdir()
        shutil.rmtree(pod_dir, ignore_errors=True)
        for path in (self._state_file(record.name), self._config_file(record.name)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _sweep(self, record: PodRecord, pid_is_ours: bool) -> None:
        """SIGKILL whatever is left of the pod: its tree, its cgroup ledger, its marker."""
        marker = self._marker(record)
        cgroup_dirs = _read_lines(self.root / record.name / "agent.cgroups")
        ledgers = [Path(p) / "cgroup.procs" for p in cgroup_dirs]
        deadline = time.monotonic() + max(self.verify_timeout_s, 2.0)
        while True:
            procs = procfs.snapshot()
            targets = procfs.descendants(procs, [record.pid]) if pid_is_ours else set()
            if pid_is_ours and record.pid in procs:
                targets.add(record.pid)
            for ledger in ledgers:
                with contextlib.suppress(OSError, ValueError):
                    targets.update(int(x) for x in ledger.read_text().split())
            targets.update(
                p.pid for p in procs.values()
                if p.pid != os.getpid() and not p.dead and procfs.environ_has(p.pid, marker)
            )  # fmt: skip
            live = [p for p in targets if p in procs and not procs[p].dead]
            if not live:
                return
            if time.monotonic() > deadline:
                log.error("pod %s: processes %s survive deletion", record.name, live)
                return
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

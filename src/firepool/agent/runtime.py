"""The agent's state machine: one attempt at a time, launch -> exit -> reset.

Rules it enforces, whatever the broker asks:
- an attempt id older than (or equal to) one already seen for that job is refused, so a
  re-queued attempt can never be confused with its predecessor; re-sending the very attempt that
  is current returns its launch again (`duplicate`) instead of starting it twice;
- nothing launches on a dirty pod (an attempt ran since the last clean reset);
- after an unclean reset the pod refuses every launch: the broker must delete it.
Exit is pushed to the broker (see `events.py`) and also kept for `status`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from firepool.agent import deps, egress, fetch, isolation, pidns, procfs, ray_node, unpack
from firepool.agent.broker_relay import BrokerRelay
from firepool.agent.cgroups import PodCgroups
from firepool.agent.deadlines import Deadline, Deadlines
from firepool.agent.entry import python_entry
from firepool.agent.events import EventPusher
from firepool.agent.isolation import Scratch, confine
from firepool.agent.layout import PodLayout
from firepool.agent.output import BoundedStream
from firepool.agent.reset import ResetContext, verified_reset
from firepool.agent.spawner import ZygoteClient, ZygoteExit
from firepool.model import ACCELERATORS, ConflictError, NotFoundError, parse_attempt_id
from firepool.protocol import (
    INLINE_OUTPUT_BYTES,
    AgentConfig,
    AttemptPhase,
    AttemptStatus,
    ExitEvent,
    Health,
    InlineOutput,
    IsolationMode,
    JobEnv,
    LaunchFailedError,
    LaunchMode,
    LaunchRequest,
    LaunchResponse,
    LogAck,
    LogAckResult,
    MemoryLimitMode,
    PodNetwork,
    RayEnv,
    ResetResult,
    StopReason,
    silence_tick_s,
)

log = logging.getLogger("firepool.agent")

#: How long an ending pod waits for the exit of the attempt it killed (then for its push):
#: both within the local backend's 5 s shutdown grace.
_SHUTDOWN_EXIT_S = 2.0

#: How long an exit waits for the attempt's output copiers to reach the end of its streams.
_OUTPUT_DRAIN_S = 2.0
#: Attempts whose exits an agent still answers for after their reset.
REMEMBERED_RESETS = 8

#: The environment variable that marks every process of this pod (see reset.py).
MARKER_VAR = "FIREPOOL_POD_MARKER"
OOM_RSS_FRACTION = 0.9


@dataclass
class Attempt:
    request: LaunchRequest
    mode: LaunchMode
    started_at: float = 0.0
    started_mono: float = 0.0
    pid: int = 0
    oom_before: int = 0
    stop_reason: StopReason | None = None
    exit: ExitEvent | None = None
    launch: LaunchResponse | None = None
    timer: Deadline | None = None
    #: Per stream, the byte offset up to which the broker has stored the output.
    acked: dict[str, int] = field(default_factory=dict)
    #: The copiers of stdout and stderr into their bounded files.
    outputs: list[BoundedStream] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.exited = threading.Event()
        #: Set once the attempt exited and the broker acknowledged all of its output.
        self.logs_acked = threading.Event()


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        zygote: tuple[subprocess.Popen[bytes], socket.socket] | None = None,
    ) -> None:
        self.config = config
        os.chdir("/")  # never pin a mount the agent replaces (the pod dir under /var/tmp)
        self.layout = PodLayout(Path(config.pod_dir))
        uid = config.job_uid if os.geteuid() == 0 else None
        self.job_user = (uid, config.job_gid or uid) if uid is not None else None
        self.layout.create(self.job_user, private=config.isolation is IsolationMode.PRIVATE)
        self.pid = os.getpid()
        self._deadlines = Deadlines("attempt-timeouts")
        self.start_ticks = procfs.boot_ticks_now() - 1
        self.marker_value = config.marker or f"{config.pod}.{secrets.token_hex(8)}"
        self.marker = f"{MARKER_VAR}={self.marker_value}".encode()
        self.attacher = isolation.Attacher(config.attach_roots)  # before anything is covered
        self.confined = self._confine()
        shm_mib = config.memory_limit_mib or 2048
        self.scratch = Scratch(
            config.isolation,
            self.layout.root,
            self.layout.tmp,
            shm_mib,
            tmp_mib=4096,
            work=self.layout.work,
            work_mib=config.workspace_mib,
            owner=self.job_user or (0, 0),
            hide_paths=config.hide_paths,
        )
        private = self.scratch.mode is IsolationMode.PRIVATE
        self.procs_hidden = private and isolation.hide_processes()
        # A container's IPC namespace is the pod's own as well (AgentConfig.container).
        self.ipc_private = config.container or (private and isolation.ipc_namespace_private())
        self.mqueues = isolation.open_mqueues()  # this IPC namespace's POSIX message queues
        if self.mqueues is None:
            log.warning("cannot open the POSIX message queues: reset will not sweep them")
        self.mounts_expected = self._mount_points() if private else None
        self.shared_dirs = [*isolation.SCRATCH_DIRS, *isolation.shared_writable()]
        #: Whose files reset removes from `shared_dirs` in weak mode: the jobs' uid (in a
        #: container, the agent's own; elsewhere never the agent's, whose user is shared).
        self.sweep_uid = self.job_user[0] if self.job_user else (
            os.getuid() if config.container else None)  # fmt: skip
        self.cgroups = PodCgroups(
            config.pod,
            config.memory_limit_mib,
            cpu_quota=config.cpu_quota,
            pids_max=config.pids_max,
            container=config.container,
        )
        self.rlimits: dict[str, int] = {}
        if config.nofile is not None:
            self.rlimits["NOFILE"] = _below_hard(resource.RLIMIT_NOFILE, config.nofile)
        if config.pids_max is not None and self.job_user is not None:
            # per uid, and the uid is the pod's own
            self.rlimits["NPROC"] = _below_hard(resource.RLIMIT_NPROC, config.pids_max)
        self.zygote_threads: int | None = None
        # The backend removes these if the agent dies without cleaning up.
        (self.layout.root / "agent.cgroups").write_text(
            "".join(f"{d}\n" for d in self.cgroups.dirs)
        )
        self.events = EventPusher(config.callback_url, config.secret)
        self._lock = threading.RLock()  # guards the fields below
        self._op = threading.Lock()  # serialises launch / reset
        self.current: Attempt | None = None
        self.reset_attempts: dict[str, AttemptStatus] = {}  # see `_remember_reset`
        self.seen: dict[str, int] = {}
        self.dirty = False
        self.unclean_reason: str | None = None
        self.healthy = True
        #: When the broker (an authorised request) was last heard from.
        self.last_contact = time.monotonic()
        #: Cut off from the broker past the bound: nothing of the attempt is reported again.
        self.fenced = False
        self.zygote = ZygoteClient(
            config.preload_modules, self._on_exit, self._on_zygote_death, started=zygote
        )
        self.zygote.join(self.cgroups.procs_files)
        #: Jobs live in the pod's PID namespace (the zygote is its init); each gets a /proc of
        #: it (in a private copy of the pod's mounts) where the zygote found that possible.
        self.pids_private = pidns.same_namespace(self.zygote.pid, self.pid) is False
        self.network = self._network()
        self.egress = self._start_egress() if self.network is PodNetwork.EGRESS else None
        isolated = self.network is not PodNetwork.HOST
        self.relay = BrokerRelay(self.layout.root / "broker.sock") if isolated else None
        self.zygote.prefork(self.pids_private)

    def _network(self) -> PodNetwork:
        """What the jobs got: the zygote's namespace is theirs (see netns.py)."""
        wanted = self.config.network
        if pidns.same_namespace(self.zygote.pid, self.pid, "net") is False:
            return wanted if wanted is not PodNetwork.HOST else PodNetwork.NONE
        if wanted is not PodNetwork.HOST:
            log.warning("no network namespace for the pod: its jobs share the host's network")
        return PodNetwork.HOST

    def _start_egress(self) -> egress.Egress:
        """The NAT and its rules, and the resolver jobs see, before the first job can run."""
        resolv = self.layout.resolv_conf
        resolv.write_text(egress.resolv_conf())
        resolv.chmod(0o644)
        return egress.start(self.zygote.pid, self.layout.root / "egress.log")

    def _socket_scope(self) -> tuple[str | None, int | None]:
        """Where reset looks for sockets left open, and whose count (see ResetContext)."""
        if self.network is not PodNetwork.HOST:
            return f"/proc/{self.zygote.pid}/net", None
        if self.job_user is not None and self.job_user[0] != 0:
            return "/proc/self/net", self.job_user[0]
        return None, None

    def _pids_confined(self) -> bool:
        """Whether reset may list the pod's processes from its cgroup alone: every job process
        is born in the PID namespace and the cgroups (the zygote, which forks them, is in both:
        it joins them asynchronously, so this is asked at each reset) and, unprivileged, can
        leave neither."""
        return (
            self.scratch.mode is IsolationMode.PRIVATE
            and self.pids_private
            and self.job_user is not None
            and self.job_user[0] != 0
            and self.zygote.pid in self.cgroups.members()
        )

    def _pid_isolation(self) -> str:
        if not self.pids_private:
            return "shared"
        return "namespace" if self.zygote.own_proc else "namespace, host /proc"

    def _confine(self) -> bool:
        cfg = self.config
        root = Path(cfg.backend_root) if cfg.backend_root else None
        if cfg.isolation is IsolationMode.WEAK or root is None or self.layout.root.parent != root:
            if cfg.isolation is not IsolationMode.WEAK:
                log.warning("pod dir is not directly under the backend root: not confined")
            return False
        try:
            confine(root, self.layout.root)
        except OSError as exc:
            log.error("cannot hide other pods and the backend's state from jobs: %s", exc)
            return False
        return True

    @staticmethod
    def _mount_points() -> frozenset[str]:
        with open("/proc/self/mountinfo") as fh:
            return frozenset(line.split()[4] for line in fh)

    # ------------------------------------------------------------------ health

    def health(self) -> Health:
        with self._lock:
            cur = self.current
            return Health(
                pod=self.config.pod,
                ok=self.healthy and self.unclean_reason is None,
                ready=self.zygote.ready.is_set(),
                attempt=cur.request.attempt if cur else None,
                dirty=self.dirty,
                unclean_reason=self.unclean_reason,
                isolation=self.scratch.mode,
                network=self.network,
                memory_limit=self.cgroups.mode,
                process_tracking=self.cgroups.tracking,
                warm_modules=self.zygote.modules,
                devices=list(self.config.devices),
                pid=self.pid,
                confined=self.confined,
                job_uid=self.job_user[0] if self.job_user else None,
                limits={
                    **self.cgroups.limits,
                    **{k.lower(): f"rlimit:{v}" for k, v in self.rlimits.items()},
                    "ipc": "namespace" if self.ipc_private else "shared",
                    "mqueue": "swept" if self.mqueues is not None else "not swept",
                    "pid": self._pid_isolation(),
                    "proc": "hidepid" if self.procs_hidden else "shared",
                },
                scratch_releasing=not self.scratch.released,
                last_scratch_release_ms=round(self.scratch.last_release_ms, 3),
            )

    # ------------------------------------------------------------------ launch

    def launch(self, req: LaunchRequest) -> LaunchResponse:
        with self._op:
            dup = self._admit(req)
            if dup is not None:
                return dup
            t0 = time.perf_counter()
            self.scratch.wait_released()  # the last reset's scratch memory is back
            attempt_dir = self.layout.attempt_logs(req.attempt)  # made when first needed
            package_cached = requirements_cached = False
            if self.zygote_threads is None and self.zygote.ready.is_set():
                self.zygote_threads = procfs.thread_count(self.zygote.pid)
            if req.package is not None:
                archive, package_cached = fetch.fetch(req.package, self.layout.package_cache)
                unpack.unpack(archive, self.layout.work)
                if self.job_user is not None:
                    _chown_tree(self.layout.work, *self.job_user)
            if req.requirements is not None:
                requirements_cached = deps.ensure(
                    req.requirements,
                    self.layout.site,
                    self.layout.work,
                    attempt_dir / "install.log",
                    user=self.job_user,
                )
            mounted = self._attach(req)
            prepare_s = time.perf_counter() - t0
            argv = ray_node.wrap(req.argv) if RayEnv.HEAD in req.topology_env else req.argv
            entry = python_entry(argv) if req.warm else None
            mode = LaunchMode.FORK if entry is not None else LaunchMode.EXEC
            attempt = Attempt(request=req, mode=mode, oom_before=self.cgroups.oom_kills())
            attempt.outputs = [
                BoundedStream(attempt_dir / stream, stream, self.config.max_output_bytes)
                for stream in ("stdout", "stderr")
            ]
            with self._lock:
                self.current = attempt
            spawn = {
                "id": req.attempt,
                "mode": mode.value,
                "argv": argv,
                "env": self._job_env(req),
                "cwd": str(self.layout.work),
                "sys_path": [str(self.layout.site)],
                "rlimit_as": self.cgroups.rlimit_as,
                "rlimits": self.rlimits,
                "uid": self.job_user[0] if self.job_user else None,
                "gid": self.job_user[1] if self.job_user else None,
                "own_proc": self.pids_private and self.zygote.own_proc,
                # A child prepared before this launch bound a directory has the pod's mounts
                # without it (its own /proc is a copy of them).
                "spare_ok": not mounted,
            }
            attempt.started_at = time.time()
            try:
                pid, mono = self.zygote.spawn(spawn, _writers(attempt.outputs))
            except LaunchFailedError:
                for output in attempt.outputs:
                    output.abandon()
                with self._lock:
                    self.current = None  # nothing runs; the pod stays dirty until reset
                raise
            for output in attempt.outputs:
                output.start()  # the job holds the write ends now (spawned = set up)
            with self._lock:
                attempt.pid, attempt.started_mono = pid, mono
                attempt.launch = LaunchResponse(
                    attempt=req.attempt,
                    pid=pid,
                    mode=mode,
                    started_at=attempt.started_at,
                    prepare_s=round(prepare_s, 6),
                    package_cached=package_cached,
                    requirements_cached=requirements_cached,
                )
                if req.timeout_s is not None and attempt.exit is None:
                    attempt.timer = self._deadlines.after(
                        req.timeout_s, functools.partial(self._time_out, req.attempt)
                    )
                return attempt.launch

    def _attach(self, req: LaunchRequest) -> bool:
        """The attempt's checkpoint directory, which outlives pods, made reachable for it;
        True when that changed the pod's mounts."""
        directory = req.topology_env.get(JobEnv.CHECKPOINT_DIR) or req.env.get(
            JobEnv.CHECKPOINT_DIR
        )
        if not directory:
            return False
        bind = self.scratch.mode is IsolationMode.PRIVATE
        try:
            self.attacher.attach(directory, bind=bind)
        except ValueError as exc:
            log.warning("checkpoint directory not attached: %s", exc)
            return False
        except OSError as exc:
            raise LaunchFailedError(
                f"cannot attach checkpoint directory {directory}: {exc}", field="topology_env"
            ) from None
        return bind

    def _admit(self, req: LaunchRequest) -> LaunchResponse | None:
        job, retry = parse_attempt_id(req.attempt)
        with self._lock:
            cur = self.current
            if cur is not None and cur.request.attempt == req.attempt and cur.launch is not None:
                return cur.launch.model_copy(update={"duplicate": True})
            if self.fenced:
                raise ConflictError("pod was cut off from its broker past its bound and is ending")
            if self.unclean_reason is not None:
                raise ConflictError(f"pod is unclean and must be deleted: {self.unclean_reason}")
            if not self.healthy:
                raise ConflictError("pod is unhealthy: the warm interpreter died")
            last = self.seen.get(job)
            if last is not None and retry <= last:
                raise ConflictError(
                    f"attempt {req.attempt} is not newer than {job}:{last}, already seen here",
                    field="attempt",
                )
            if self.dirty:
                raise ConflictError("pod has not been reset since its last attempt")
            self.seen[job] = retry
            self.dirty = True
        return None

    def _job_env(self, req: LaunchRequest) -> dict[str, str]:
        cfg = self.config
        bindir = os.path.dirname(sys.executable)
        env = {
            "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
            "HOME": str(self.layout.work),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "TMPDIR": self.scratch.tmpdir,
            "PYTHONPATH": str(self.layout.site),
            "USER": "firepool",
            "LOGNAME": "firepool",
            "FIREPOOL_POD": cfg.pod,
            "FIREPOOL_ATTEMPT": req.attempt,
            MARKER_VAR: self.marker_value,
            "CUDA_VISIBLE_DEVICES": ",".join(cfg.devices),
        }
        if cfg.devices:
            # The card's whole framebuffer for this job, and a fresh accounting file per
            # attempt, so a reused pod never inherits an earlier limit (paper A.4).
            mib = cfg.device_memory_mib or ACCELERATORS.get("fake", 16) * 1024
            for i in range(len(cfg.devices)):
                env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{mib}m"
            safe = req.attempt.replace("/", "_").replace(":", "_")
            env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(self.layout.gpu / f"{safe}.cache")
        env.update(cfg.extra_env)
        env.update(req.env)
        env.update(req.topology_env)
        if self.relay is not None:  # the broker is out of the job's reach: relay its reports
            self.relay.relay_for(env.get(JobEnv.URL))
            if JobEnv.URL in env:
                env[JobEnv.URL] = self.relay.url
        return env

    # ------------------------------------------------------------------ exit

    def _on_exit(self, ev: ZygoteExit) -> None:
        with self._lock:
            attempt = self.current
        output = None
        if attempt is not None and attempt.request.attempt == ev.attempt:
            # The output files complete before the exit is reported (a descendant still
            # holding a stream open is copied on, until the reset).
            ended = all([o.wait(_OUTPUT_DRAIN_S) for o in attempt.outputs])
            output = self._inline_output(attempt) if ended else None
        with self._lock:
            attempt = self.current
            if attempt is None or attempt.request.attempt != ev.attempt:
                log.warning("exit of unknown attempt %s (pid %d)", ev.attempt, ev.pid)
                return
            if attempt.timer is not None:
                attempt.timer.cancel()
            code = sig = None
            if os.WIFSIGNALED(ev.status):
                sig = os.WTERMSIG(ev.status)
                # Who sent it, as far as the agent knows: a signal with no stop reason came
                # from outside firepool (or from the job itself) and is judged Killed.
                log.info("%s ended by signal %d (stop: %s)", ev.attempt, sig, attempt.stop_reason)
            else:
                code = os.waitstatus_to_exitcode(ev.status)
            oom, source = self._oom_verdict(attempt, sig, code, ev.maxrss_kib)
            now = time.time()
            runtime = max(0.0, ev.t - ev.t0)
            attempt.exit = ExitEvent(
                pod=self.config.pod,
                attempt=ev.attempt,
                exit_code=code,
                signal=sig,
                oom=oom,
                oom_source=source,
                stop_reason=attempt.stop_reason,
                runtime_s=round(runtime, 6),
                started_at=attempt.started_at,
                finished_at=now,
                max_rss_kib=ev.maxrss_kib,
                output=output,
            )
            attempt.exited.set()
            if not self._unacked(attempt):
                attempt.logs_acked.set()  # nothing to keep for the broker
            event = attempt.exit
            if self.fenced:
                log.warning("exit of fenced attempt %s not reported", ev.attempt)
                return
            if attempt.request.awaits_exit:
                return  # the broker asks for it (`wait_status`)
        self.events.push(event)

    def _inline_output(self, attempt: Attempt) -> InlineOutput | None:
        """The attempt's whole output when it is small enough to ride on the exit event."""
        name = attempt.request.attempt
        sizes = {s: self.layout.log_size(name, s) for s in ("stdout", "stderr")}
        if sum(sizes.values()) > INLINE_OUTPUT_BYTES:
            return None
        try:
            return InlineOutput(
                stdout=self.layout.read_log(name, "stdout") if sizes["stdout"] else b"",
                stderr=self.layout.read_log(name, "stderr") if sizes["stderr"] else b"",
            )
        except OSError as exc:
            log.warning("output of %s not sent with its exit: %s", name, exc)
            return None

    def _oom_verdict(
        self, attempt: Attempt, sig: int | None, code: int | None, maxrss_kib: int
    ) -> tuple[bool, Literal["cgroup", "heuristic"] | None]:
        if self.cgroups.oom_file is not None:
            if self.cgroups.oom_kills() > attempt.oom_before:
                return True, "cgroup"
            return False, None
        limit = self.cgroups.limit_bytes
        if limit is None or attempt.stop_reason is not None:
            return False, None
        if sig == signal.SIGKILL and maxrss_kib * 1024 >= OOM_RSS_FRACTION * limit:
            return True, "heuristic"
        if self.cgroups.mode is MemoryLimitMode.RLIMIT and code not in (None, 0):
            tail = self.layout.tail(attempt.request.attempt, "stderr", 4096)
            if b"MemoryError" in tail:
                return True, "heuristic"
        return False, None

    def _on_zygote_death(self) -> None:
        log.error("the warm interpreter died; the pod is unhealthy")
        with self._lock:
            self.healthy = False

    # ------------------------------------------------------------------ status / stop

    def _attempt(self, attempt_id: str) -> Attempt:
        with self._lock:
            cur = self.current
        if cur is None or cur.request.attempt != attempt_id:
            raise NotFoundError(f"attempt {attempt_id} is not known here", field="attempt")
        return cur

    def wait_exit(self, attempt_id: str, timeout: float) -> bool:
        """Block up to `timeout` s for the attempt's exit; True once it exited. Lets a log
        follower wake at the exit instead of on its next poll (the broker's log drain, and
        with it the pod's release, waited up to one poll interval per job)."""
        return self._attempt(attempt_id).exited.wait(timeout)

    def wait_status(self, attempt_id: str, wait_s: float) -> AttemptStatus:
        """The attempt's status once it exited, or after `wait_s` s if it still runs: the
        broker's one request for an exit, in place of an event the agent would push."""
        status = self.status(attempt_id)
        if status.exit is not None or status.phase is not AttemptPhase.RUNNING:
            return status
        self.wait_exit(attempt_id, wait_s)
        return self.status(attempt_id)

    def status(self, attempt_id: str) -> AttemptStatus:
        with self._lock:
            remembered = self.reset_attempts.get(attempt_id)
        if remembered is not None:
            return remembered
        cur = self._attempt(attempt_id)
        with self._lock:
            return AttemptStatus(
                attempt=attempt_id,
                phase=AttemptPhase.EXITED if cur.exit else AttemptPhase.RUNNING,
                pid=cur.pid,
                mode=cur.mode,
                started_at=cur.started_at,
                exit=cur.exit,
            )

    def stop(
        self, attempt_id: str, grace_s: float, reason: StopReason = StopReason.STOP
    ) -> AttemptStatus:
        """SIGTERM the attempt's process group, wait `grace_s`, then SIGKILL its whole tree; an
        injected fault (`StopReason.FAULT`) kills the tree at once."""
        cur = self._attempt(attempt_id)
        with self._lock:
            if cur.exit is None and cur.stop_reason is None:
                cur.stop_reason = reason
        log.info("stop of %s asked (%s); it stands as %s", attempt_id, reason, cur.stop_reason)
        if cur.exit is None and cur.pid and reason is StopReason.FAULT:
            self._kill_tree()
            cur.exited.wait(5.0)
        elif cur.exit is None and cur.pid:
            procfs.killpg_quietly(cur.pid, signal.SIGTERM)
            if not cur.exited.wait(grace_s):
                self._kill_tree()
                cur.exited.wait(5.0)
        return self.status(attempt_id)

    def _time_out(self, attempt_id: str) -> None:
        """On the deadline thread: the stop waits out its grace, so it gets a thread of its own
        (the deadline thread is every attempt's; a timeout is rare)."""
        threading.Thread(
            target=self._timeout, args=(attempt_id,), name="timeout", daemon=True
        ).start()

    def _timeout(self, attempt_id: str) -> None:
        with contextlib.suppress(NotFoundError):
            self.stop(attempt_id, grace_s=5.0, reason=StopReason.TIMEOUT)

    def _kill_tree(self) -> None:
        procs = procfs.snapshot()
        keep = {self.pid, self.zygote.pid}
        for pid in (procfs.descendants(procs, [self.pid]) | self.cgroups.members()) - keep:
            procfs.kill_quietly(pid)

    # ------------------------------------------------------------------ reset

    def reset(self, await_logs_s: float = 0.0, logs: LogAck | None = None) -> ResetResult:
        """Kill, wipe and verify. The exited attempt's output is kept until the broker has
        acknowledged it (`logs`, or a separate acknowledgement within `await_logs_s`); what
        it had not is reported in the result."""
        with self._op:
            self.zygote.discard()
            with self._lock:
                cur = self.current
            unacked: dict[str, int] = {}
            if cur is not None and cur.launch is not None:
                if logs is not None:
                    self._acknowledge(cur, logs)
                if cur.exit is not None and await_logs_s > 0:
                    cur.logs_acked.wait(await_logs_s)
                unacked = self._unacked(cur)
            # Only an attempt that had ended on its own is answered for after the reset (the
            # broker's resets follow the exit); one the reset itself killed is forgotten.
            ended_before = cur is not None and cur.exit is not None
            if cur is not None and cur.timer is not None:
                cur.timer.cancel()
            if cur is not None and cur.exit is None:
                cur.stop_reason = cur.stop_reason or StopReason.STOP
            net_dir, sockets_uid = self._socket_scope()
            ctx = ResetContext(
                agent_pid=self.pid,
                keep_pids={self.zygote.pid},
                cgroups=self.cgroups,
                scratch=self.scratch,
                marker=self.marker,
                pod_start_ticks=self.start_ticks,
                dirs_to_empty=[
                    *(d for d in self.layout.wiped_dirs if not self.scratch.is_mounted(d)),
                    *self.scratch.dirs_to_empty,
                    *map(Path, self.config.wipe_volumes),
                ],
                verify_timeout_s=self.config.verify_timeout_s,
                faults=self.config.faults,
                job_user=self.job_user,
                owned_dirs=[
                    self.layout.work,
                    self.layout.gpu,
                    *([self.layout.tmp] if self.scratch.mode is IsolationMode.WEAK else []),
                ],
                ipc_private=self.ipc_private,
                shared_dirs=self.shared_dirs if self.scratch.mode is IsolationMode.WEAK else [],
                sweep_uid=self.sweep_uid,
                mounts_expected=self.mounts_expected,
                zygote_threads=self.zygote_threads,
                detach=self._detach_attempt,
                mqueues=self.mqueues,
                pids_confined=self._pids_confined(),
                services=frozenset({self.egress.proc.pid} if self.egress else ()),
                net_dir=net_dir,
                sockets_uid=sockets_uid,
            )
            result = verified_reset(ctx)
            if unacked:
                result = result.model_copy(update={"logs_unacked": unacked})
                log.warning("reset removed unacknowledged output of %s: %s",
                            cur.request.attempt if cur else "?", unacked)
            if cur is not None and cur.exit is None:
                cur.exited.wait(1.0)  # the zygote reports the leader's death
            if result.clean:
                self.zygote.prefork(self.pids_private)  # the next job's child, in a clean pod
            with self._lock:
                if result.clean:
                    self.dirty = False
                    if cur is not None and ended_before:
                        self._remember_reset(cur)
                    self.current = None
                else:
                    self.unclean_reason = result.reason
            # A line per clean reset would put a disk write on the reset path; say only what
            # the broker must act on.
            if not result.clean:
                log.warning("reset unclean after %.2f ms: %s", result.duration_ms, result.reason)
            return result

    def _detach_attempt(self) -> None:
        """What the attempt holds outside its processes, let go before the reset wipes: its
        output streams create no file from now on (one made after the wipe would survive
        it), its checkpoint directory is unbound."""
        with self._lock:
            cur = self.current
        if cur is not None:
            for output in cur.outputs:
                output.seal()
        self.attacher.detach_all()

    def _remember_reset(self, cur: Attempt) -> None:
        """Keep an attempt's exit past its reset (the last few, under the lock): a broker
        killed after the reset but before its verdict was durable asks at recovery, and an
        attempt that ended must be judged by its exit, not run again as one never launched."""
        assert cur.exit is not None
        self.reset_attempts[cur.request.attempt] = AttemptStatus(
            attempt=cur.request.attempt,
            phase=AttemptPhase.EXITED,
            pid=cur.pid,
            mode=cur.mode,
            started_at=cur.started_at,
            # Its output is stored by now (the reset followed the acknowledgement).
            exit=cur.exit.model_copy(update={"output": None}),
        )
        while len(self.reset_attempts) > REMEMBERED_RESETS:
            self.reset_attempts.pop(next(iter(self.reset_attempts)))

    # ------------------------------------------------------------------ output

    def ack_logs(self, attempt_id: str, ack: LogAck) -> LogAckResult:
        """The broker stored the attempt's streams up to these offsets (never moves back)."""
        cur = self._attempt(attempt_id)
        complete = self._acknowledge(cur, ack)
        with self._lock:
            return LogAckResult(attempt=attempt_id, acked=dict(cur.acked), complete=complete)

    def _acknowledge(self, cur: Attempt, ack: LogAck) -> bool:
        """Whether the attempt exited with every byte of its output acknowledged."""
        with self._lock:
            for stream in ("stdout", "stderr"):
                cur.acked[stream] = max(cur.acked.get(stream, 0), getattr(ack, stream))
            complete = cur.exit is not None and not self._unacked(cur)
            if complete:
                cur.logs_acked.set()
            return complete

    def _unacked(self, cur: Attempt) -> dict[str, int]:
        out: dict[str, int] = {}
        for stream in ("stdout", "stderr"):
            try:
                size = self.layout.log_file(cur.request.attempt, stream).stat().st_size
            except OSError:
                continue
            if size > cur.acked.get(stream, 0):
                out[stream] = size - cur.acked.get(stream, 0)
        return out

    # ------------------------------------------------------------------ broker silence

    def touch(self) -> None:
        """The broker spoke (any authorised request)."""
        self.last_contact = time.monotonic()

    def orphaned(self) -> bool:
        """The broker has been silent longer than `broker_silence_s`: the pod must end."""
        bound = self.config.broker_silence_s
        return bound is not None and time.monotonic() - self.last_contact > bound

    def watch_broker(self, end: threading.Event) -> None:
        """Set `end` once the broker has been silent too long, or this agent was itself
        stopped (SIGSTOP, a frozen VM: a partition seen from inside) for longer than the
        bound, during which its broker will have declared the pod lost and run the attempt
        elsewhere. The attempt is fenced first: its exit is never reported, and ending the
        pod kills it (a daemon thread's body)."""
        bound = self.config.broker_silence_s
        if bound is None:
            return
        tick = silence_tick_s(bound)
        last = time.monotonic()
        while not end.wait(tick):
            now = time.monotonic()
            stalled, last = now - last > bound, now
            if stalled or self.orphaned():
                with self._lock:
                    self.fenced = True
                log.warning(
                    "%s for over %.1fs: ending the pod",
                    "stopped" if stalled else "no word from the broker",
                    bound,
                )
                end.set()

    # ------------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        """Kill every process of the pod, then the zygote; remove our cgroups. An attempt
        still running is killed with `StopReason.SHUTDOWN`: its exit says the pod ended under
        it (the broker judges a lost pod), not that the job was killed."""
        with self._lock:
            cur = self.current
            if cur is not None and cur.exit is None and cur.stop_reason is None:
                cur.stop_reason = StopReason.SHUTDOWN
        if cur is not None and cur.exit is None:
            log.warning("pod ending: attempt %s is killed", cur.request.attempt)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            self._kill_tree()
            procs = procfs.snapshot()
            rest = procfs.descendants(procs, [self.pid]) - {self.zygote.pid}
            if not any(p in procs and not procs[p].dead for p in rest):
                break
            time.sleep(0.01)
        if cur is not None and cur.pid:
            # Its exit comes from the warm interpreter's reader, and is pushed to the broker
            # before the pusher closes: a delete does not leave the broker polling a pod that
            # is gone to learn what became of its attempt.
            cur.exited.wait(_SHUTDOWN_EXIT_S)
        self.zygote.close()
        if self.egress is not None:
            self.egress.close()
        if self.relay is not None:
            self.relay.close()
        self.events.close(timeout=_SHUTDOWN_EXIT_S)
        self.cgroups.remove()


def _writers(outputs: list[BoundedStream]) -> tuple[int, int]:
    out, err = (output.writer for output in outputs)
    assert out is not None and err is not None  # not started yet
    return out, err


def _below_hard(which: int, value: int) -> int:
    """A limit the agent can actually set (raising a hard limit needs CAP_SYS_RESOURCE,
    which a container's root may lack)."""
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Hand an unpacked package to the job's user (the agent unpacks it as root)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, name), uid, gid)

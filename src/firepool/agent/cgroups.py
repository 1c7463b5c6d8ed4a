"""Per-pod control groups: the memory limit, the OOM counter and a second process ledger.

The pool's memory limit is enforced with the best mechanism the host allows, in this order:
a cgroup v2 `memory.max`, a cgroup v1 `memory.limit_in_bytes`, else `RLIMIT_AS` on each
attempt's processes; in a container (Kubernetes) the container's own limit, whose cgroup its
runtime made. Which one won is reported (health, logs), never assumed.

The pool's CPU quota and the pod's process cap go the same way (cgroup v2 `cpu.max` and
`pids.max` where those controllers are enabled, else the v1 `cpu` and `pids` hierarchies), with
`RLIMIT_NPROC` on the pod's own uid as the process cap's fallback (and second line: a per-pod uid
makes that per-user limit a per-pod one). `Health.limits` says which mechanism holds each.

Independently, a cgroup v2 directory without controllers is used as a process ledger when the
unified hierarchy is writable: the zygote joins it once, so every job process is born in it,
and `cgroup.procs` lists them even after they `setsid` or double-fork (a process leaves only by
writing itself elsewhere, which needs privileges the broker does not hand out on purpose).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from firepool.agent import procfs
from firepool.protocol import MemoryLimitMode

log = logging.getLogger("firepool.agent")


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fs type, super options) for every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fstype, _src, opts = [*right.split(), "", "", ""][:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((left.split()[4], fstype, opts))
    return found


def _own_paths() -> dict[str, str]:
    """Controller list (or '' for v2) -> this process's cgroup path."""
    paths = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _id, controllers, path = line.rstrip("\n").split(":", 2)
            paths[controllers] = path
    return paths


def _make(base: str, rel: str, name: str) -> Path | None:
    target = Path(base + rel.rstrip("/")) / name
    try:
        target.mkdir(exist_ok=True)
        return target
    except OSError:
        return None


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


CFS_PERIOD_US = 100_000
#: The cgroup v2 controllers a pod's limits need.
V2_CONTROLLERS = ("memory", "pids", "cpu")


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def enable_v2_controllers(group: Path, wanted: tuple[str, ...]) -> dict[str, str]:
    """Make `wanted` controllers available in `group` by enabling them in its parent's
    `cgroup.subtree_control` where the unified hierarchy has them but nobody enabled them for
    children. The kernel allows that in the root cgroup and in a delegated parent that holds no
    process itself; a parent holding processes gets the threaded controllers (cpu, pids) but
    answers EBUSY for memory. Returns {controller: why} for each
    wanted controller that is still missing: bound to a v1 hierarchy, or refused."""
    parent = group.parent
    have = _words(group / "cgroup.controllers")
    offered = _words(parent / "cgroup.controllers")
    missing: dict[str, str] = {}
    for controller in wanted:
        if controller in have:
            continue
        if controller not in offered:
            missing[controller] = "not in the unified hierarchy (a v1 hierarchy holds it)"
            continue
        try:
            (parent / "cgroup.subtree_control").write_text(f"+{controller}")
        except OSError as exc:
            missing[controller] = f"cannot enable it below {parent}: {exc.strerror}"
            continue
        if controller not in _words(group / "cgroup.controllers"):
            missing[controller] = f"enabled below {parent} but absent from {group}"
    return missing


def place_v2_group(
    mount: str, own: str, name: str, wanted: tuple[str, ...]
) -> tuple[Path | None, dict[str, str]]:
    """Make the pod's v2 group and give it the `wanted` controllers; returns the group (None if
    it cannot be made) and {controller: why} for those it still lacks.

    Below the agent's own cgroup first. That works in the root cgroup, but a non-root cgroup
    holding the agent (a systemd unit with `Delegate=yes` and the broker moved into a leaf of
    it) refuses domain controllers such as memory for children (EBUSY). Then the group goes
    beside the agent's cgroup, below the delegated parent that holds no process, if the
    controllers come there."""
    group = _make(mount, own, name)
    if group is None:
        return None, {}
    refused = enable_v2_controllers(group, wanted)
    parent = own.rstrip("/").rpartition("/")[0]
    if not refused or not own.strip("/"):
        return group, refused
    beside = _make(mount, parent, name)
    if beside is None or beside == group:
        return group, refused
    refused_beside = enable_v2_controllers(beside, wanted)
    if len(refused_beside) < len(refused):
        keep, drop, why = beside, group, refused_beside
    else:
        keep, drop, why = group, beside, refused
    with contextlib.suppress(OSError):
        drop.rmdir()
    return keep, why


def _container_oom_file(mounts: list[tuple[str, str, str]]) -> Path | None:
    """A container's own memory cgroup, where its runtime mounts it (read-only): the kernel
    counts there the OOM kills the container's limit causes, which are its jobs' (the agent
    cannot make a cgroup of its own there, so this is the pod's only OOM counter)."""
    for mount, kind, options in mounts:
        if kind == "cgroup2":
            candidate = Path(mount) / "memory.events"
        elif kind == "cgroup" and "memory" in options.split(","):
            candidate = Path(mount) / "memory.oom_control"
        else:
            continue
        try:
            if b"oom_kill " in procfs.read_small(str(candidate)):
                return candidate
        except OSError:
            continue
    return None


class PodCgroups:
    def __init__(
        self,
        pod: str,
        memory_limit_mib: int | None,
        *,
        cpu_quota: float | None = None,
        pids_max: int | None = None,
        container: bool = False,
    ) -> None:
        self.limits: dict[str, str] = {}
        self.limit_bytes = memory_limit_mib * 1024 * 1024 if memory_limit_mib else None
        self.mode = MemoryLimitMode.NONE
        self.ledger: Path | None = None  # cgroup v2 dir used to list/kill processes
        self.memory: Path | None = None  # where the memory limit and OOM counter live
        #: The file whose `oom_kill` line counts the kernel's OOM kills of the pod's jobs.
        self.oom_file: Path | None = None
        self._dirs: list[Path] = []
        self._procs_files: tuple[str, ...] = ()
        #: Controllers the unified hierarchy has but could not give the pod, and why.
        self.v2_refused: dict[str, str] = {}
        name = f"firepool-{pod}"
        try:
            mounts = _mounts()
            own = _own_paths()
        except OSError:
            mounts, own = [], {}
        v2 = next((m for m, t, _ in mounts if t == "cgroup2"), None)
        if v2 is not None and "" in own:
            self.ledger, self.v2_refused = place_v2_group(v2, own[""], name, V2_CONTROLLERS)
            if self.ledger is not None:
                self._dirs.append(self.ledger)
        if self.limit_bytes is None:
            self.mode = MemoryLimitMode.NONE
        elif self.ledger is not None and self._v2_memory(self.ledger):
            self.memory = self.ledger
            self.mode = MemoryLimitMode.CGROUP2
        else:
            v1 = next((m for m, t, o in mounts if t == "cgroup" and "memory" in o.split(",")), None)
            key = next((k for k in own if "memory" in k.split(",")), None)
            made = _make(v1, own[key], name) if v1 and key else None
            if made is not None and _write(made / "memory.limit_in_bytes", str(self.limit_bytes)):
                _write(made / "memory.memsw.limit_in_bytes", str(self.limit_bytes))  # no swap out
                self.memory = made
                self._dirs.append(made)
                self.mode = MemoryLimitMode.CGROUP1
            else:
                if made is not None:
                    with contextlib.suppress(OSError):
                        made.rmdir()
                in_container = container and _container_oom_file(mounts) is not None
                self.mode = MemoryLimitMode.CONTAINER if in_container else MemoryLimitMode.RLIMIT
        if self.memory is not None:
            unified = self.mode is MemoryLimitMode.CGROUP2
            self.oom_file = self.memory / ("memory.events" if unified else "memory.oom_control")
        elif container:
            self.oom_file = _container_oom_file(mounts)
        if self.limit_bytes is not None:
            self.limits["memory"] = f"{self.mode.value}:{self.limit_bytes}"
        if pids_max is not None:
            self._limit("pids", mounts, own, name, {"pids.max": str(pids_max)}, {})
        if cpu_quota is not None:
            quota = max(1000, int(cpu_quota * CFS_PERIOD_US))
            self._limit(
                "cpu",
                mounts,
                own,
                name,
                {"cpu.max": f"{quota} {CFS_PERIOD_US}"},
                {"cpu.cfs_period_us": str(CFS_PERIOD_US), "cpu.cfs_quota_us": str(quota)},
            )
        log.info("limits: %s; process ledger: %s; cgroup v2 lacks %s",
                 self.limits, self.ledger, self.v2_refused or "nothing")  # fmt: skip

    def _limit(
        self,
        controller: str,
        mounts: list[tuple[str, str, str]],
        own: dict[str, str],
        name: str,
        v2: dict[str, str],
        v1: dict[str, str],
    ) -> None:
        """Set one controller's limit through v2 (in the ledger) or its own v1 hierarchy."""
        if self.ledger is not None and v2:
            try:
                enabled = controller in (self.ledger / "cgroup.controllers").read_text().split()
            except OSError:
                enabled = False
            if enabled and all(_write(self.ledger / k, v) for k, v in v2.items()):
                self.limits[controller] = f"cgroup2:{next(iter(v2.values()))}"
                return
        v1 = v1 or dict(v2)
        root = next((m for m, t, o in mounts if t == "cgroup" and controller in o.split(",")), None)
        key = next((k for k in own if controller in k.split(",")), None)
        made = _make(root, own[key], name) if root and key else None
        if made is None:
            return
        if all(_write(made / k, v) for k, v in v1.items()):
            if made not in self._dirs:
                self._dirs.append(made)
            self.limits[controller] = f"cgroup1:{list(v1.values())[-1]}"
        else:
            with contextlib.suppress(OSError):
                made.rmdir()

    def _v2_memory(self, path: Path) -> bool:
        try:
            if "memory" not in (path / "cgroup.controllers").read_text().split():
                return False
        except OSError:
            return False
        assert self.limit_bytes is not None
        if not _write(path / "memory.max", str(self.limit_bytes)):
            return False
        _write(path / "memory.swap.max", "0")  # best effort: no swap out
        return True

    @property
    def dirs(self) -> list[Path]:
        return list(self._dirs)

    @property
    def procs_files(self) -> list[str]:
        """Files a new job process writes its pid into, before it runs any job code. Made
        once per set of directories: every reset reads them in each killing round."""
        return list(self._procs())

    def _procs(self) -> tuple[str, ...]:
        if len(self._procs_files) != len(self._dirs):  # directories are only ever added
            self._procs_files = tuple(str(d / "cgroup.procs") for d in self._dirs)
        return self._procs_files

    @property
    def rlimit_as(self) -> int | None:
        return self.limit_bytes if self.mode is MemoryLimitMode.RLIMIT else None

    @property
    def tracking(self) -> list[str]:
        names = ["subreaper", "session", "proc-tree", "environ-marker"]
        if self.ledger is not None:
            names.append("cgroup2-ledger")
        if self.mode is MemoryLimitMode.CGROUP1:
            names.append("cgroup1-memory")
        names += [f"cgroup1-{c}" for c, how in self.limits.items()
                  if c != "memory" and how.startswith("cgroup1")]  # fmt: skip
        return names

    def members(self) -> set[int]:
        pids: set[int] = set()
        for path in self._procs():
            with contextlib.suppress(OSError):
                pids.update(map(int, procfs.read_small(path).split()))
        return pids

    def kill_all(self) -> None:
        """Kill every process in the ledger at once. Not for resets: the warm interpreter lives
        in the ledger too (its children are born there); only for tearing the pod down."""
        if self.ledger is not None:
            _write(self.ledger / "cgroup.kill", "1")

    def oom_kills(self) -> int:
        if self.oom_file is None:
            return 0
        try:
            for line in procfs.read_small(str(self.oom_file)).splitlines():
                key, _, value = line.partition(b" ")
                if key == b"oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        for d in self._dirs:
            with contextlib.suppress(OSError):
                d.rmdir()

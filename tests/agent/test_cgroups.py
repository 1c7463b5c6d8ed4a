"""Per-pod cgroups against this machine's real kernel, on whichever hierarchies it gives.

Each limit must be held by the hierarchy the kernel actually offers for its controller (v2 if
the unified hierarchy has it, else v1) and read back as configured there. The cgroup v2 code that
does not depend on controllers (the ledger, `cgroup.kill`, enabling a controller for a pod, and
the kernel's refusal below a parent that holds processes) runs on any unified hierarchy. The
fork bomb and memory hog of test_hostile_jobs.py check enforcement in whichever one holds them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.agent import cgroups, procfs
from firepool.agent.cgroups import PodCgroups, enable_v2_controllers
from firepool.testing.host import needs

MIB = 1024 * 1024
#: Controllers the kernel calls threaded: they may be enabled below a cgroup holding processes.
THREADED = frozenset({"cpu", "cpuset", "perf_event", "pids"})



def _unified() -> Path | None:
    """Where this process sits in the unified (v2) hierarchy, if it is mounted and writable."""
    mount = next((m for m, t, _ in cgroups._mounts() if t == "cgroup2"), None)
    own = cgroups._own_paths().get("")
    if mount is None or own is None or os.geteuid() != 0:
        return None
    return Path(mount + own.rstrip("/"))


def _v2_root() -> Path:
    return Path(next(m for m, t, _ in cgroups._mounts() if t == "cgroup2"))


def _v1(controller: str) -> Path | None:
    mount = next(
        (m for m, t, o in cgroups._mounts() if t == "cgroup" and controller in o.split(",")), None
    )
    key = next((k for k in cgroups._own_paths() if controller in k.split(",")), None)
    return Path(mount + cgroups._own_paths()[key].rstrip("/")) if mount and key else None


@pytest.fixture
def pod() -> Iterator[PodCgroups]:
    group = PodCgroups(f"test-{uuid.uuid4().hex[:8]}", 256, cpu_quota=0.5, pids_max=64)
    try:
        yield group
    finally:
        group.remove()
    assert not any(d.exists() for d in group.dirs)


def test_each_limit_is_held_where_the_kernel_offers_its_controller(pod: PodCgroups) -> None:
    files = {  # controller -> (v2 file, v1 file, value written)
        "memory": ("memory.max", "memory.limit_in_bytes", str(256 * MIB)),
        "pids": ("pids.max", "pids.max", "64"),
        "cpu": ("cpu.max", "cpu.cfs_quota_us", "50000"),
    }
    for controller, (v2_file, v1_file, value) in files.items():
        ledger = pod.ledger
        offered = ledger is not None and controller in cgroups._words(ledger / "cgroup.controllers")
        claim = pod.limits.get(controller, "")
        if offered:
            assert ledger is not None and claim.startswith("cgroup2:"), (controller, claim)
            assert (ledger / v2_file).read_text().split()[0] == value
            assert controller not in pod.v2_refused
        elif _v1(controller) is not None:
            assert claim.startswith("cgroup1:"), (controller, claim)
            held = next(d for d in pod.dirs if str(d).startswith(str(_v1(controller))))
            assert (held / v1_file).read_text().strip() == value
            if ledger is not None:  # the unified hierarchy exists but could not give it
                assert controller in pod.v2_refused
        elif ledger is not None and controller in cgroups._words(_v2_root() / "cgroup.controllers"):
            # v2-only for this controller, yet not in the pod's group: say why, never pass
            assert controller in pod.v2_refused and not claim.startswith("cgroup"), claim
            needs(f"{controller} for the pod's v2 group ({pod.v2_refused[controller]})")
        else:
            assert controller not in pod.limits or claim.startswith("rlimit"), claim
    if pod.memory is not None:
        assert pod.mode.value in ("cgroup2", "cgroup1") and pod.oom_kills() == 0


DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    time.sleep(1000)
time.sleep(1000)
"""


def test_the_v2_ledger_lists_a_setsid_tree_and_kills_it_at_once(pod: PodCgroups) -> None:
    if pod.ledger is None:
        needs("a writable cgroup v2 hierarchy")
    assert pod.ledger is not None and "cgroup2-ledger" in pod.tracking
    procs = str(pod.ledger / "cgroup.procs")
    # Born in the ledger, as jobs are (the zygote joined it before forking them).
    leader = subprocess.Popen(
        ["sh", "-c", f'echo $$ > {procs} && exec "$0" -c "$1"', sys.executable, DAEMON],
        start_new_session=True,
    )
    try:

        def daemon_of(members: set[int]) -> int | None:
            """The leader's child once it has left the leader's session."""
            for pid in members - {leader.pid}:
                proc = procfs.read_proc(pid)
                if proc is not None and proc.sid == pid:
                    return pid
            return None

        deadline = time.monotonic() + 10
        while (child := daemon_of(pod.members())) is None:
            assert time.monotonic() < deadline, pod.members()
            time.sleep(0.01)
        assert leader.pid in pod.members()
        pod.kill_all()  # cgroup.kill: the whole group, in one write
        assert leader.wait(10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while procfs.alive(child) or pod.members():
            assert time.monotonic() < deadline, pod.members()
            time.sleep(0.01)
    finally:
        pod.kill_all()  # the daemon too, should the test fail before it did
        with contextlib.suppress(ProcessLookupError):
            leader.kill()
        leader.wait()
        deadline = time.monotonic() + 10
        while pod.members() and time.monotonic() < deadline:  # empty before the fixture's rmdir
            time.sleep(0.01)


@contextlib.contextmanager
def _group(path: Path) -> Iterator[Path]:
    path.mkdir()
    try:
        yield path
    finally:
        path.rmdir()


def test_a_v2_controller_is_enabled_for_the_pod_unless_its_parent_holds_processes() -> None:
    """The path a pure v2 host takes: the parent offers a controller nobody enabled for its
    children. Run with whatever controller this kernel's unified root offers (memory, pids and
    cpu on a v2 host; hugetlb where v1 holds the rest), a domain one first: the kernel lets a
    parent holding processes enable threaded controllers (cpu, cpuset, perf_event, pids) for its
    children, so only a domain controller shows the refusal. The root's setting is put back."""
    base = _unified()
    if base is None:
        needs("a writable cgroup v2 hierarchy")
    assert base is not None
    root = Path(next(m for m, t, _ in cgroups._mounts() if t == "cgroup2"))
    controller = _domain_controller(root)
    enabled_before = controller in cgroups._words(root / "cgroup.subtree_control")
    try:
        with _group(root / f"firepool-test-{uuid.uuid4().hex[:8]}") as parent:
            # below the root cgroup (an agent there, as on this kind of host): it comes
            assert enable_v2_controllers(parent, (controller,)) == {}
            assert controller in cgroups._words(parent / "cgroup.controllers")
            # below a parent holding no process (a delegated subtree): it comes too
            with _group(parent / "pod") as group:
                assert controller not in cgroups._words(group / "cgroup.controllers")
                assert enable_v2_controllers(group, (controller,)) == {}
                assert controller in cgroups._words(group / "cgroup.controllers")
                assert controller in cgroups._words(parent / "cgroup.subtree_control")
                (parent / "cgroup.subtree_control").write_text(f"-{controller}")
            # a parent holding a process (the broker's cgroup on a systemd host): refused
            sleeper = subprocess.Popen(["sleep", "100"])
            try:
                (parent / "cgroup.procs").write_text(str(sleeper.pid))
                with _group(parent / "pod2") as group:
                    refused = enable_v2_controllers(group, (controller,))
                    assert "busy" in refused[controller].lower(), refused
                    assert controller not in cgroups._words(group / "cgroup.controllers")
            finally:
                sleeper.kill()
                sleeper.wait()
            deadline = time.monotonic() + 5
            while (parent / "cgroup.procs").read_text().strip():
                assert time.monotonic() < deadline
                time.sleep(0.01)
    finally:
        if not enabled_before:
            with contextlib.suppress(OSError):
                (root / "cgroup.subtree_control").write_text(f"-{controller}")


def _domain_controller(root: Path) -> str:
    """A controller of the unified root that the kernel refuses below a cgroup with processes."""
    offered = sorted(cgroups._words(root / "cgroup.controllers"))
    domain = [c for c in offered if c not in THREADED]
    if not domain:
        needs("a domain controller (memory, io, hugetlb, ...) in the unified hierarchy")
    return "memory" if "memory" in domain else domain[0]


PLACE = """
import json, os, sys
from firepool.agent import cgroups
mount, leaf, controller = sys.argv[1:]
with open(mount + leaf + "/cgroup.procs", "w") as fh:
    fh.write(str(os.getpid()))
group, refused = cgroups.place_v2_group(mount, cgroups._own_paths()[""], "pod", (controller,))
print(json.dumps({"group": str(group), "refused": refused}))
"""


def test_an_agent_in_a_delegated_leaf_gets_its_pod_group_beside_it() -> None:
    """systemd `Delegate=yes` with the broker moved into a leaf of its unit: below the leaf
    (which holds the agent) a domain controller is refused, beside it the unit gives it."""
    if _unified() is None:
        needs("a writable cgroup v2 hierarchy")
    root = _v2_root()
    controller = _domain_controller(root)
    enabled_before = controller in cgroups._words(root / "cgroup.subtree_control")
    unit_name = f"firepool-test-{uuid.uuid4().hex[:8]}"
    try:
        with _group(root / unit_name) as unit, _group(unit / "broker") as leaf:
            assert enable_v2_controllers(unit, (controller,)) == {}
            (unit / "cgroup.subtree_control").write_text(f"+{controller}")  # as systemd does
            done = subprocess.run(
                [sys.executable, "-c", PLACE, str(root), f"/{unit_name}/broker", controller],
                capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            placed = json.loads(done.stdout)
            try:
                assert placed == {"group": str(unit / "pod"), "refused": {}}, placed
                assert controller in cgroups._words(unit / "pod" / "cgroup.controllers")
                assert not (leaf / "pod").exists()  # the refused try was cleaned up
            finally:
                with contextlib.suppress(OSError):
                    (unit / "pod").rmdir()
            deadline = time.monotonic() + 5
            while (leaf / "cgroup.procs").read_text().strip():
                assert time.monotonic() < deadline
                time.sleep(0.01)
            (unit / "cgroup.subtree_control").write_text(f"-{controller}")
    finally:
        if not enabled_before:
            with contextlib.suppress(OSError):
                (root / "cgroup.subtree_control").write_text(f"-{controller}")


def _join_and_run(pod: PodCgroups, code: str) -> subprocess.Popen[str]:
    """A Python process that joins every group of the pod (as a job does) before `code` runs."""
    joins = "".join(f"echo $$ > {f} && " for f in pod.procs_files)
    return subprocess.Popen(
        ["sh", "-c", f'{joins}exec "$0" -c "$1"', sys.executable, code],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _empty(pod: PodCgroups) -> None:
    """Kill whatever is left in the pod's groups (cgroup.kill where v2, else one by one)."""
    pod.kill_all()
    deadline = time.monotonic() + 30
    while members := pod.members():
        assert time.monotonic() < deadline, members
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _held(pod: PodCgroups, controller: str) -> Path:
    """The group holding `controller`'s limit, or the needs() of a host without one."""
    claim = pod.limits.get(controller, "")
    if not claim.startswith("cgroup"):
        needs(f"a {controller} cgroup ({claim or 'none'} here)")
    if claim.startswith("cgroup2:"):
        assert pod.ledger is not None
        return pod.ledger
    v1 = _v1(controller)
    return next(d for d in pod.dirs if v1 is not None and str(d).startswith(str(v1)))


FORK_BOMB = """
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(1000)
            os._exit(0)
        n += 1
except OSError as exc:
    print(n, exc.errno, flush=True)
time.sleep(1000)
"""


def test_a_fork_bomb_stops_at_pids_max(pod: PodCgroups) -> None:
    group = _held(pod, "pids")
    bomb = _join_and_run(pod, FORK_BOMB)
    try:
        assert bomb.stdout is not None
        forked, errno_ = (int(x) for x in bomb.stdout.readline().split())
        assert errno_ == 11 and forked < 64  # EAGAIN from the kernel at pids.max (64)
        assert len(pod.members()) <= 64
        events = dict(line.split() for line in (group / "pids.events").read_text().splitlines())
        assert int(events["max"]) > 0  # the group's own counter of refused forks
    finally:
        _empty(pod)
        bomb.wait()


HOG = "b = bytearray(512 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])"


def test_a_memory_hog_is_oom_killed_in_its_own_group_only(pod: PodCgroups) -> None:
    _held(pod, "memory")
    neighbour = subprocess.Popen(["sleep", "1000"])  # outside the pod, as the agent is
    try:
        hog = _join_and_run(pod, HOG)
        assert hog.wait(60) == -signal.SIGKILL  # 512 MiB written against memory.max 256 MiB
        assert pod.oom_kills() >= 1
        assert neighbour.poll() is None
    finally:
        neighbour.kill()
        neighbour.wait()
        _empty(pod)

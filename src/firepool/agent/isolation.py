"""The pod's sandbox inside its namespaces: scratch spaces, hidden paths, IPC, /proc.

In `private` mode the backend started the agent in its own mount and IPC namespaces
(`unshare --mount --ipc`). The agent then gives the pod fresh tmpfs instances on /tmp, /var/tmp
and /dev/shm that only this pod's processes see, wherever firepool is installed: whatever the
pod needs from the host's /tmp or /var/tmp (the interpreter, firepool's code, its own directory)
is bind-mounted back into the fresh tmpfs (read-only, except the pod directory the agent writes
to). Each tmpfs is assembled on a staging mount point and moved over its target in one step, so
the warm interpreter, importing modules while the agent sets up, never sees a half-built /tmp.

Wiping a tmpfs is an unmount plus a new mount: constant time however many files or bytes a job
left (8 GiB of shm costs the same as none). The workspace (package root, cwd, HOME) gets its own
tmpfs too, like a memory-backed emptyDir: its pages count against the pod's memory limit, and
10,000 scratch files vanish in one unmount instead of 10,000 unlinks.

The same skeleton-and-binds tmpfs (root-owned, 0755, so jobs cannot write it) covers the
broker's data directory and other pods (`hide_paths`), and every directory a job's uid may not
pass through on its way to something it needs (a pyenv interpreter under /root 0700): the job
reaches exactly the needed paths and nothing else there. Other world-writable host directories
(/run/lock...) get an empty read-only tmpfs, and /proc is remounted with `hidepid=invisible`
(jobs see only their own processes).

In `weak` mode (no namespace) /tmp, /var/tmp, /dev/shm and SysV IPC are the host's: jobs get
TMPDIR pointing at a per-pod directory, and reset removes whatever the pod's uid owns in the
shared places (files, IPC objects). Jobs of two weak pods can still see each other's files while
both run; the agent says so in its log and in `Health.isolation`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import stat
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from firepool.agent import procfs
from firepool.agent.emptying import empty_dir
from firepool.protocol import IsolationMode

log = logging.getLogger("firepool.agent")

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_MOVE = 0x2000
MNT_DETACH = 0x2
IPC_RMID = 0

#: The scratch directories every pod gets privately (private mode) or swept (weak mode).
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
#: Other places an unprivileged user may write on a typical host; covered read-only (private)
#: or swept by owner (weak).
OTHER_SHARED = ("/run/lock", "/var/lock", "/var/crash", "/var/mail", "/var/lib/php/sessions")

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str) -> None:
    rc = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or ''} on {target}: {os.strerror(err)}")


def mount_tmpfs(target: str, size_mib: int, mode: int = 0o1777, uid: int = 0, gid: int = 0) -> None:
    opts = f"size={size_mib}m,mode={mode:o},uid={uid},gid={gid}"
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, opts)


def umount(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def cover(target: str) -> None:
    """An empty, read-only tmpfs over `target`: nothing below it can be read or written."""
    mount_tmpfs(target, 1, mode=0o755)
    _mount(None, target, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "")


def confine(backend_root: Path, pod_dir: Path) -> None:
    """Hide every other pod, and the backend's state files (which hold pod secrets), from this
    pod: cover the backend root with an empty read-only tmpfs and bind this pod's own directory
    back in place. Only this pod's mount namespace sees the cover; the backend sees all."""
    fd = os.open(pod_dir, os.O_PATH | os.O_DIRECTORY)
    try:
        mount_tmpfs(str(backend_root), 1, mode=0o755)
        os.mkdir(pod_dir, 0o700)
        _mount(f"/proc/self/fd/{fd}", str(pod_dir), None, MS_BIND, "")
        _mount(None, str(backend_root), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "")
    finally:
        os.close(fd)


def hide_processes() -> bool:
    """Remount /proc with `hidepid=invisible`: a job sees only its own uid's processes (their
    command lines included); the agent, as root, still sees every process."""
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
        return True
    except OSError as exc:
        log.warning("cannot hide other processes from jobs: %s", exc)
        return False


def shared_writable() -> list[str]:
    """Host directories besides the scratch ones that any user may write to."""
    found = []
    for path in OTHER_SHARED:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o002:
            found.append(path)
    return found


def _is_under(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def needed_paths(pod_dir: Path) -> dict[Path, bool]:
    """What the pod needs from the host (path -> writable): its own directory, the interpreter
    and the broker's code. A private tmpfs over /tmp or /var/tmp binds back those under it."""
    import firepool  # the agent's own package: jobs and dependency installs need it

    readonly = {
        Path(sys.prefix).resolve(),
        Path(sys.base_prefix).resolve(),
        Path(sys.executable).resolve(),
        Path(firepool.__file__).resolve().parent,
    }
    needed = dict.fromkeys(readonly, False)
    needed[pod_dir.resolve()] = True
    return needed


def blocked_ancestors(needed: dict[Path, bool]) -> list[str]:
    """The outermost directory on the way to each needed path that a job's user may not pass
    through (no execute bit for others: /root holding a pyenv interpreter, or the broker's
    data directory). The agent covers each with a tmpfs that binds the needed paths back, so
    jobs reach exactly those and nothing else below it."""
    found: set[str] = set()
    for path in needed:
        for ancestor in reversed(path.parents[:-1]):  # outermost first, "/" excluded
            try:
                if not os.stat(ancestor).st_mode & 0o001:
                    found.add(str(ancestor))
                    break
            except OSError:
                break
    return sorted(
        b for b in found if not any(b != o and _is_under(Path(b), Path(o)) for o in found)
    )


def cover_targets(paths: list[str]) -> list[str]:
    """The outermost of `paths` that exist as directories, less those a private /tmp or
    /var/tmp hides anyway and those holding a scratch directory (covering / would)."""
    scratch = [Path(d) for d in SCRATCH_DIRS]
    found = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir() or any(_is_under(path, d) for d in scratch):
            continue  # nothing to hide, or a fresh scratch tmpfs hides it already
        if any(_is_under(d, path) for d in scratch):
            log.warning("not covering %s: it holds a scratch directory", path)
            continue
        found.append(str(path.resolve()))
    return sorted(
        p for p in set(found) if not any(p != o and _is_under(Path(p), Path(o)) for o in found)
    )


def needed_under(target: str, needed: dict[Path, bool]) -> list[tuple[Path, bool]]:
    """The paths below `target`, outermost first, without paths inside another of them."""
    base = Path(target)
    below = sorted((p, w) for p, w in needed.items() if p != base and _is_under(p, base))
    kept: list[tuple[Path, bool]] = []
    for path, writable in below:
        if not any(_is_under(path, outer) for outer, _ in kept):
            kept.append((path, writable))
    return kept


@dataclass
class _Bind:
    fd: int  # O_PATH descriptor on the host path, kept for re-binding after every wipe
    rel: str  # path relative to the tmpfs root
    writable: bool
    is_dir: bool


@dataclass
class _Tmpfs:
    target: str
    size_mib: int
    mode: int = 0o1777
    uid: int = 0
    gid: int = 0
    binds: list[_Bind] = field(default_factory=list)
    #: (inodes, blocks) in use right after it was built: the fresh state to compare against.
    baseline: tuple[int, int] = (1, 0)


def _usage(path: str) -> tuple[int, int]:
    fs = os.statvfs(path)
    return fs.f_files - fs.f_ffree, fs.f_blocks - fs.f_bfree


class Scratch:
    """Where a job's tmp and shm live, and how to make them empty again."""

    def __init__(
        self,
        mode: IsolationMode,
        pod_dir: Path,
        pod_tmp: Path,
        shm_mib: int,
        tmp_mib: int,
        work: Path | None = None,
        work_mib: int = 8192,
        owner: tuple[int, int] = (0, 0),
        hide_paths: tuple[str, ...] = (),
    ) -> None:
        self.requested = mode
        self.hide_paths = hide_paths
        self.pod_dir = pod_dir
        self.pod_tmp = pod_tmp
        self.work = work
        self.owner = owner
        self.stage = pod_dir / ".stage"
        self.mounts: list[_Tmpfs] = []
        self._releasing = threading.Event()
        self._releasing.set()
        self.last_release_ms = 0.0
        self.mode = IsolationMode.WEAK
        self.tmpdir = str(pod_tmp)
        self.covered: list[str] = []
        if mode is not IsolationMode.WEAK:
            self._go_private(shm_mib, tmp_mib, work_mib)
        if self.mode is IsolationMode.WEAK:
            log.warning(
                "weaker isolation: /tmp, /var/tmp, /dev/shm and SysV IPC are shared with the "
                "host; jobs get TMPDIR=%s and reset removes what the pod's uid left there",
                pod_tmp,
            )
            blocked = blocked_ancestors(needed_paths(pod_dir)) if owner != (0, 0) else []
            if blocked:
                # Without a namespace nothing can be bound past them; private mode would.
                log.warning(
                    "jobs run as uid %d and cannot pass through %s: they reach only the "
                    "modules the warm interpreter preloaded from there",
                    owner[0],
                    ", ".join(blocked),
                )

    def _go_private(self, shm_mib: int, tmp_mib: int, work_mib: int) -> None:
        opened: list[int] = []
        try:
            self.stage.mkdir(mode=0o700, exist_ok=True)
            needed = needed_paths(self.pod_dir)
            covers = cover_targets([*blocked_ancestors(needed), *self.hide_paths])
            for target in (*covers, "/tmp", "/var/tmp"):
                scratch = target in ("/tmp", "/var/tmp")
                mount = _Tmpfs(target, tmp_mib) if scratch else _Tmpfs(target, 1, 0o755)
                for path, writable in needed_under(target, needed):
                    fd = os.open(path, os.O_PATH)
                    opened.append(fd)
                    rel = str(path.relative_to(target))
                    mount.binds.append(_Bind(fd, rel, writable, path.is_dir()))
                self.mounts.append(mount)
            if self.work is not None:
                uid, gid = self.owner
                self.mounts.append(_Tmpfs(str(self.work), work_mib, 0o700, uid, gid))
            self.mounts.append(_Tmpfs("/dev/shm", shm_mib))
            for mount in self.mounts:
                self._build(mount)
            for shared in shared_writable():
                cover(shared)
                self.covered.append(shared)
            self.tmpdir = "/tmp"
            self.mode = IsolationMode.PRIVATE
            log.info("private mount namespace: tmpfs on %s; covered %s",
                     ", ".join(m.target for m in self.mounts), self.covered)  # fmt: skip
        except OSError as exc:
            log.error("cannot set up private scratch (%s); falling back to weak isolation", exc)
            for target in reversed(self.covered + [m.target for m in self.mounts]):
                with contextlib.suppress(OSError):
                    umount(target)
            for fd in opened:
                os.close(fd)
            self.mounts.clear()
            self.covered.clear()
            self.mode = IsolationMode.WEAK

    def _build(self, mount: _Tmpfs) -> None:
        """A fresh tmpfs with its binds, assembled on the staging point, then moved over the
        target (whose previous instance, if any, is already detached)."""
        stage = str(self.stage)
        mount_tmpfs(stage, mount.size_mib, mount.mode, mount.uid, mount.gid)
        try:
            for bind in mount.binds:
                dest = self.stage / bind.rel
                for parent in reversed(dest.relative_to(self.stage).parents[:-1]):
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(self.stage / parent, 0o755)
                if bind.is_dir:
                    os.mkdir(dest, 0o755)
                else:
                    os.close(os.open(dest, os.O_CREAT | os.O_WRONLY, 0o644))
                _mount(f"/proc/self/fd/{bind.fd}", str(dest), None, MS_BIND, "")
                if not bind.writable:
                    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
                    _mount(None, str(dest), None, flags, "")
            mount.baseline = _usage(stage)
            _mount(stage, mount.target, None, MS_MOVE, "")
        except OSError:
            with contextlib.suppress(OSError):
                umount(stage)
            raise

    def pristine(self, mount: _Tmpfs) -> bool:
        """True if the tmpfs is indistinguishable from a fresh one: the inodes and blocks in use
        are those it was built with (so no file, directory or open-but-unlinked file was
        added), its root keeps its owner and mode and carries no extended attributes."""
        try:
            st = os.stat(mount.target)
            return (
                _usage(mount.target) == mount.baseline
                and st.st_mode & 0o7777 == mount.mode
                and (st.st_uid, st.st_gid) == (mount.uid, mount.gid)
                and not os.listxattr(mount.target)
            )
        except OSError:
            return False

    def wipe_mounts(self) -> None:
        """Replace each used tmpfs by a new, empty one (raises on failure).

        A tmpfs that holds another of ours (the pod directory under /var/tmp holds the
        workspace) is replaced together with it. Old instances are detached innermost first
        while we still hold a descriptor on each root, so every unmount is O(1): from that
        moment no path reaches the old files. Dropping the descriptors frees the pages (about
        0.2 s per GiB here) on a background thread; `wait_released` lets the next launch wait
        for the memory to be back."""
        redo: list[_Tmpfs] = []
        for mount in self.mounts:
            if not self.pristine(mount) or any(_is_under(Path(mount.target), Path(r.target))
                                               for r in redo):  # fmt: skip
                redo.append(mount)
        if not redo:
            self.last_release_ms = 0.0
            return
        held: list[int] = []
        try:
            for mount in reversed(redo):
                held.append(os.open(mount.target, os.O_RDONLY | os.O_DIRECTORY))
                umount(mount.target)
            for mount in redo:
                self._build(mount)
        finally:
            self.last_release_ms = 0.0  # this reset's figure, not an earlier one's
            if held:
                self._releasing.clear()
                threading.Thread(
                    target=self._release, args=(held,), name="scratch-release", daemon=True
                ).start()

    def _release(self, fds: list[int]) -> None:
        start = time.perf_counter()
        for fd in fds:
            os.close(fd)
        self.last_release_ms = (time.perf_counter() - start) * 1000
        self._releasing.set()

    @property
    def released(self) -> bool:
        return self._releasing.is_set()

    def wait_released(self, timeout: float = 60.0) -> bool:
        return self._releasing.wait(timeout)

    def is_mounted(self, path: Path) -> bool:
        return str(path) in {m.target for m in self.mounts}

    @property
    def mount_points(self) -> set[str]:
        return {m.target for m in self.mounts} | set(self.covered)

    @property
    def dirs_to_empty(self) -> list[Path]:
        """Scratch directories reset must empty file by file (those not on our own tmpfs)."""
        return [] if self.mode is IsolationMode.PRIVATE else [self.pod_tmp]


# --------------------------------------------------------------------------- attached dirs


class Attacher:
    """Makes one host directory per attempt (its checkpoint directory, which outlives pods)
    reachable and writable for the job, and nothing else under the same root.

    Descriptors on the allowed roots are taken before any cover is mounted, so the agent can
    still walk down from them (a cover hides paths, not directories already held open). In
    private mode the attempt's directory is bound at its own path inside the pod and unbound
    at reset; its tree is opened up to any uid (`a+rwX`) because the next attempt of the same
    job may run on another pod, under another uid; only pods running that job see it."""

    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots: dict[Path, int] = {}
        for raw in roots:
            with contextlib.suppress(OSError):
                path = Path(raw).resolve()
                self.roots[path] = os.open(path, os.O_PATH | os.O_DIRECTORY)
        self.bound: list[str] = []

    def attach(self, target: str, bind: bool) -> None:
        """Raise `ValueError` for a directory outside every allowed root."""
        path = Path(os.path.normpath(target))
        for root, root_fd in self.roots.items():
            try:
                rel = path.relative_to(root)
            except ValueError:
                continue
            if not rel.parts or ".." in rel.parts:
                break
            fd = _open_below(root_fd, rel.parts)
            try:
                _open_up(fd)
                if bind:
                    _mkdirs(path)
                    _mount(f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_NOSUID, "")
                    self.bound.append(str(path))
            finally:
                os.close(fd)
            return
        raise ValueError(f"{target} is not below an attachable root")

    def detach_all(self) -> None:
        while self.bound:
            umount(self.bound.pop())


def _open_below(root_fd: int, parts: tuple[str, ...]) -> int:
    """Open root/parts... as a directory, never following a symlink on the way."""
    fd = os.open(".", os.O_PATH | os.O_DIRECTORY, dir_fd=root_fd)
    for part in parts:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
        try:
            nxt = os.open(part, flags, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


#: A default POSIX ACL `u::rwx,g::rwx,o::rwx` (xattr format: version 2, then tag, perm, id):
#: what ranks on other pods (other uids) create in the directory stays writable for all.
_OPEN_DEFAULT_ACL = struct.pack(
    "<I" + "HHI" * 3, 2, 0x01, 7, 0xFFFFFFFF, 0x04, 7, 0xFFFFFFFF, 0x20, 7, 0xFFFFFFFF
)


def _open_up(dir_fd: int) -> None:
    """`chmod -R a+rwX` through descriptors only: another rank of the same job may be running
    on another pod and swap an entry for a symlink meanwhile; nothing here follows one."""
    os.fchmod(dir_fd, 0o777)
    with contextlib.suppress(OSError):  # no ACL support: files made meanwhile stay private
        os.setxattr(dir_fd, "system.posix_acl_default", _OPEN_DEFAULT_ACL)
    with os.scandir(dir_fd) as it:
        names = [entry.name for entry in it]
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError:
            continue  # a symlink (ELOOP), a socket, or gone
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                _open_up(fd)
            elif stat.S_ISREG(st.st_mode):
                os.fchmod(fd, (st.st_mode & 0o777) | 0o666)
        finally:
            os.close(fd)


def _mkdirs(path: Path) -> None:
    """Create `path` in the pod's view (on our own covering tmpfs, where it is hidden)."""
    for parent in reversed((path, *path.parents)):
        with contextlib.suppress(FileExistsError):
            os.mkdir(parent, 0o755)


# --------------------------------------------------------------------------- IPC


def ipc_namespace_private() -> bool:
    """True if this process has an IPC namespace of its own: not its parent's (the broker,
    which `unshare` exec'd us for; pid 1 may sit in a user namespace we cannot inspect)."""
    try:
        return os.readlink("/proc/self/ns/ipc") != os.readlink(f"/proc/{os.getppid()}/ns/ipc")
    except OSError as exc:
        log.warning("cannot tell whether the IPC namespace is private: %s", exc)
        return False


def sysv_objects(uid: int | None) -> list[tuple[str, int]]:
    """SysV IPC objects of this IPC namespace (kind, id); with `uid`, only those the uid owns
    or created."""
    found: list[tuple[str, int]] = []
    for kind in ("shm", "sem", "msg"):
        try:
            header, *rows = [line.split() for line in _read_lines(f"/proc/sysvipc/{kind}")]
        except (OSError, ValueError):  # no such file, or not even a header
            continue
        owner, creator = header.index("uid"), header.index("cuid")
        for row in rows:
            if uid is None or uid in (int(row[owner]), int(row[creator])):
                found.append((kind, int(row[1])))
    return found


def _read_lines(path: str) -> list[str]:
    return procfs.read_small(path).decode().splitlines()


#: fsopen(2), fsconfig(2), fsmount(2): one number on every architecture (new syscalls are).
_SYS_FSOPEN, _SYS_FSCONFIG, _SYS_FSMOUNT = 430, 431, 432
_FSCONFIG_CMD_CREATE = 6
_CLOEXEC = 1


def open_mqueues() -> int | None:
    """A directory descriptor on this IPC namespace's POSIX message queues, or None where the
    kernel gives none. A detached mqueue mount (the new mount API) is in no mount table, so
    it needs no mount point (most hosts have no /dev/mqueue) and changes no one's view;
    whatever a job made with mq_open(3) shows up in it as a file owned by the job's uid."""
    fs = mnt = -1
    try:
        fs = _libc.syscall(_SYS_FSOPEN, b"mqueue", _CLOEXEC)
        if fs < 0 or _libc.syscall(_SYS_FSCONFIG, fs, _FSCONFIG_CMD_CREATE, None, None, 0) != 0:
            return None
        mnt = _libc.syscall(_SYS_FSMOUNT, fs, _CLOEXEC, 0)
        if mnt < 0:
            return None
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=mnt)
    except OSError:
        return None
    finally:
        for fd in (fs, mnt):
            if fd >= 0:
                os.close(fd)


def mqueues(root: int, uid: int | None) -> list[str]:
    """Message queue names under `root` (see `open_mqueues`); with `uid`, only the uid's."""
    with os.scandir(root) as it:
        return [e.name for e in it if uid is None or e.stat(follow_symlinks=False).st_uid == uid]


def remove_mqueues(root: int, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=root)


def remove_sysv(objects: list[tuple[str, int]]) -> None:
    for kind, ident in objects:
        if kind == "shm":
            _libc.shmctl(ident, IPC_RMID, None)
        elif kind == "sem":
            _libc.semctl(ident, 0, IPC_RMID)
        else:
            _libc.msgctl(ident, IPC_RMID, None)


# --------------------------------------------------------------------------- weak-mode sweep


def owned_leftovers(uid: int, roots: list[str]) -> list[str]:
    """Entries under `roots` that `uid` owns, looking only where `uid` could have created
    something (directories it owns or that anyone may write to)."""
    found: list[str] = []
    stack = [r for r in roots if os.path.isdir(r)]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == uid:
                found.append(entry.path)
            elif stat.S_ISDIR(st.st_mode) and st.st_mode & 0o002:
                stack.append(entry.path)
    return found


def remove_tree(path: str) -> None:
    """Remove a file or a directory tree without following symlinks."""
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        os.chmod(path, 0o700)  # a job may have left its directory unwritable
        empty_dir(Path(path))
        os.rmdir(path)
    else:
        os.unlink(path)


def sweep_owned(uid: int, roots: list[str]) -> list[str]:
    """Remove what `uid` left under `roots`; returns what could not be removed."""
    left = []
    for path in owned_leftovers(uid, roots):
        try:
            remove_tree(path)
        except OSError as exc:
            left.append(f"{path} ({exc.strerror})")
    return left

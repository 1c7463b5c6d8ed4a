"""The pod's scratch spaces: /dev/shm, tmp and the directories reset empties.

In `private` mode the backend started the agent in its own mount namespace (`unshare -m`);
the agent then mounts fresh tmpfs instances on /dev/shm and /tmp that only this pod's processes
see, and wiping one is an unmount plus a new mount: constant time however many files or bytes
a job left (8 GiB of shm costs the same as none). The workspace (package root, cwd, HOME) gets
its own tmpfs too, like a memory-backed emptyDir: its pages count against the pod's memory
limit, and 10,000 scratch files vanish in one unmount instead of 10,000 unlinks (on this
class of VM disk an unlink costs tens of microseconds, and seconds once the journal is
flushed). When the pod directory itself lives under
/tmp, mounting over /tmp would hide it, so only /dev/shm is private (`private-shm`) and the
pod's own tmp dir, exported as TMPDIR, gets the tmpfs instead.

In `weak` mode (no namespace) /dev/shm and /tmp are the host's: jobs get TMPDIR pointing at a
per-pod directory that reset empties, and whatever they write to the shared /dev/shm or /tmp
is not covered. The agent says so in its log and in `Health.isolation`.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import time
from pathlib import Path

from firepool.protocol import IsolationMode

log = logging.getLogger("firepool.agent")

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MNT_DETACH = 0x2

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


def mount_tmpfs(target: str, size_mib: int, mode: str = "1777") -> None:
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mib}m,mode={mode}")


def confine(backend_root: Path, pod_dir: Path) -> None:
    """Hide every other pod, and the backend's state files (which hold pod secrets), from this
    pod: cover the backend root with an empty read-only tmpfs and bind this pod's own directory
    back in place. Only this pod's mount namespace sees the cover; the backend sees all."""
    fd = os.open(pod_dir, os.O_PATH | os.O_DIRECTORY)
    try:
        mount_tmpfs(str(backend_root), 1, mode="0755")
        os.mkdir(pod_dir, 0o700)
        _mount(f"/proc/self/fd/{fd}", str(pod_dir), None, MS_BIND, "")
        _mount(None, str(backend_root), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "")
    finally:
        os.close(fd)


def umount(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def pristine(target: str) -> bool:
    """True if the tmpfs at `target` is indistinguishable from a fresh one: only its root inode
    in use (so no file, directory or open-but-unlinked file), no blocks, the root still 1777
    root-owned and without extended attributes (which could carry data across jobs)."""
    try:
        fs = os.statvfs(target)
        st = os.stat(target)
        return (
            fs.f_files - fs.f_ffree == 1
            and fs.f_blocks == fs.f_bfree
            and st.st_mode & 0o7777 == 0o1777
            and st.st_uid == 0
            and st.st_gid == 0
            and not os.listxattr(target)
        )
    except OSError:
        return False


def needed_under_tmp(pod_tmp: Path) -> list[str]:
    """What a private tmpfs over /tmp would hide from the pod: its own directory, or the
    interpreter and the broker's code (a checkout or virtual environment under /tmp)."""
    tmp = Path("/tmp")
    import firepool  # the agent's own package: jobs and dependency installs need it

    needed = {
        "the pod directory": pod_tmp,
        "the Python environment": Path(sys.prefix).resolve(),
        "the Python interpreter": Path(sys.executable).resolve(),
        "firepool's code": Path(firepool.__file__).resolve().parent,
    }
    return [what for what, path in needed.items() if _is_under(path, tmp)]


def _is_under(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


class Scratch:
    """Where a job's tmp and shm live, and how to make them empty again."""

    def __init__(
        self,
        mode: IsolationMode,
        pod_tmp: Path,
        shm_mib: int,
        tmp_mib: int,
        work: Path | None = None,
        work_mib: int = 8192,
    ) -> None:
        self.requested = mode
        self.pod_tmp = pod_tmp
        self.work = work
        self.work_mib = work_mib
        self.shm_mib = shm_mib
        self.tmp_mib = tmp_mib
        self.mounts: list[tuple[str, int]] = []  # (target, size) of our own tmpfs mounts
        self._releasing = threading.Event()
        self._releasing.set()
        self.last_release_ms = 0.0
        self.mode = IsolationMode.WEAK
        self.tmpdir = str(pod_tmp)
        if mode is not IsolationMode.WEAK:
            self._go_private()
        if self.mode is IsolationMode.WEAK:
            log.warning(
                "weaker isolation: /dev/shm and /tmp are shared with the host; jobs get "
                "TMPDIR=%s, and files they put in /dev/shm or /tmp are not wiped by reset",
                pod_tmp,
            )

    def _go_private(self) -> None:
        try:
            mount_tmpfs("/dev/shm", self.shm_mib)
            self.mounts.append(("/dev/shm", self.shm_mib))
            if self.work is not None:
                mount_tmpfs(str(self.work), self.work_mib)
                self.mounts.append((str(self.work), self.work_mib))
            host_paths = needed_under_tmp(self.pod_tmp)
            if host_paths:
                mount_tmpfs(str(self.pod_tmp), self.tmp_mib)
                self.mounts.append((str(self.pod_tmp), self.tmp_mib))
                self.mode = IsolationMode.PRIVATE_SHM
                log.warning(
                    "%s under /tmp: /dev/shm is private, /tmp is shared; "
                    "jobs get TMPDIR=%s (a private tmpfs)",
                    " and ".join(host_paths),
                    self.pod_tmp,
                )
            else:
                mount_tmpfs("/tmp", self.tmp_mib)
                self.mounts.append(("/tmp", self.tmp_mib))
                self.tmpdir = "/tmp"
                self.mode = IsolationMode.PRIVATE
            log.info("private mount namespace: tmpfs on %s", ", ".join(t for t, _ in self.mounts))
        except OSError as exc:
            log.error("cannot set up private scratch (%s); falling back to weak isolation", exc)
            for target, _ in reversed(self.mounts):
                try:
                    umount(target)
                except OSError as undo:
                    log.error("%s", undo)
            self.mounts.clear()
            self.mode = IsolationMode.WEAK

    def wipe_mounts(self) -> None:
        """Replace each private tmpfs by a new, empty one (raises on failure).

        The old instance is detached while we still hold a descriptor on its root, so the
        unmount itself is O(1): from that moment no path reaches the old files. Dropping the
        descriptor frees the pages (about 0.2 s per GiB here), and that happens on a background
        thread; `wait_released` lets the next launch wait for the memory to be back."""
        held: list[int] = []
        try:
            for target, size in self.mounts:
                if pristine(target):
                    continue  # nothing was ever left there: a remount would change nothing
                held.append(os.open(target, os.O_RDONLY | os.O_DIRECTORY))
                umount(target)
                mount_tmpfs(target, size)
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
        return str(path) in {t for t, _ in self.mounts}

    @property
    def dirs_to_empty(self) -> list[Path]:
        """Scratch directories reset must empty file by file (those not on our own tmpfs)."""
        return [] if self.is_mounted(self.pod_tmp) else [self.pod_tmp]

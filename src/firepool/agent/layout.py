"""Where things live inside a pod directory, and which of them reset empties.

    <pod_dir>/work       the package root and the job's cwd/HOME   (emptied by reset)
    <pod_dir>/tmp        TMPDIR in weak mode                       (emptied by reset)
    <pod_dir>/gpu        per-attempt GPU accounting files          (emptied by reset)
    <pod_dir>/logs       <attempt>/stdout, stderr, install.log     (emptied by reset)
                         each made when first written: absent means empty
    <pod_dir>/site       requirements installed for this pod       (kept: owner-only reuse)
    <pod_dir>/cache      verified package archives                 (kept: read-only cache)
    <pod_dir>/resolv.conf an egress pod's resolver, jobs' /etc/resolv.conf (written by the agent)

Files the backend writes (state.json, agent.json, agent.log) sit beside these and are never
visible as the job's workspace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: An egress pod's resolver configuration (agent/egress.py), under the pod directory.
RESOLV_FILE = "resolv.conf"


def safe_name(attempt: str) -> str:
    return attempt.replace("/", "_").replace(":", "_")


@dataclass(frozen=True)
class PodLayout:
    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def gpu(self) -> Path:
        return self.root / "gpu"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def site(self) -> Path:
        return self.root / "site"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def resolv_conf(self) -> Path:
        return self.root / RESOLV_FILE

    @property
    def package_cache(self) -> Path:
        return self.cache / "packages"

    @property
    def wiped_dirs(self) -> list[Path]:
        return [self.work, self.gpu, self.logs]

    def create(self, job_user: tuple[int, int] | None = None, private: bool = True) -> None:
        """Make the directories, owned so that the job's user can write only its own
        workspace, tmp (weak mode), GPU accounting files and installed requirements, and
        read nothing else of the pod (logs, cached packages) but its installed requirements."""
        for path in (self.work, self.tmp, self.gpu, self.logs, self.site, self.package_cache):
            path.mkdir(parents=True, exist_ok=True)
        if job_user is None:
            os.chmod(self.tmp, 0o1777)
            return
        uid, gid = job_user
        os.chmod(self.root, 0o711)
        for path in (self.logs, self.cache):
            os.chmod(path, 0o700)
        for path in (self.work, self.gpu, self.site, *([] if private else [self.tmp])):
            os.chown(path, uid, gid)
            os.chmod(path, 0o700)
        if private:  # TMPDIR is the pod's own /tmp: nobody writes here
            os.chmod(self.tmp, 0o700)

    def attempt_logs(self, attempt: str) -> Path:
        """The attempt's log directory, not created: whatever first writes there does (most
        attempts of short jobs never need one). A missing file is an empty log."""
        return self.logs / safe_name(attempt)

    def log_file(self, attempt: str, stream: str) -> Path:
        return self.logs / safe_name(attempt) / stream

    def log_size(self, attempt: str, stream: str) -> int:
        """Bytes of the stream so far (0 when the attempt wrote none)."""
        try:
            return self.log_file(attempt, stream).stat().st_size
        except FileNotFoundError:
            return 0

    def read_log(self, attempt: str, stream: str) -> bytes:
        try:
            return self.log_file(attempt, stream).read_bytes()
        except FileNotFoundError:
            return b""

    def tail(self, attempt: str, stream: str, size: int) -> bytes:
        try:
            with open(self.log_file(attempt, stream), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - size))
                return fh.read()
        except OSError:
            return b""

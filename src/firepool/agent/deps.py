"""Install a job's extra requirements into the pod's own site directory.

The completion marker is named by the SHA-256 of the requirements file and written only after
the installer exits cleanly; every install first removes all markers, so at most one exists,
naming the last set installed completely. Returning to an earlier set reinstalls it instead of
trusting a stale marker; the same set again installs nothing. uv is used when it is on PATH
(much faster), else pip. Packages go to `site/` with `--target`, which the agent puts first on
the job's import path, so one pod's installs never leak into another pod or the base image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from firepool.protocol import DependencyInstallFailedError, RequirementsRef

MARKER_PREFIX = ".firepool-requirements-"


def marker_for(site: Path, digest: str) -> Path:
    return site / f"{MARKER_PREFIX}{digest.removeprefix('sha256:')}.done"


def markers(site: Path) -> list[Path]:
    return sorted(site.glob(f"{MARKER_PREFIX}*.done"))


def installer_command(req_file: Path, site: Path) -> list[str]:
    uv = shutil.which("uv")
    if uv is not None:
        return [uv, "pip", "install", "--python", sys.executable, "--target", str(site),
                "-r", str(req_file)]  # fmt: skip
    return [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
            "--upgrade", "--target", str(site), "-r", str(req_file)]  # fmt: skip


def ensure(req: RequirementsRef, site: Path, work: Path, log_path: Path,
           timeout: float = 1800.0, user: tuple[int, int] | None = None) -> bool:  # fmt: skip
    """Install `req` unless its marker exists; returns True when nothing had to be done.

    With `user` the installer runs as the pod's unprivileged uid (a requirement's build step
    is the caller's code as much as the job is); it reads the requirements through an
    inherited descriptor, since it cannot open the agent's log directory."""
    site.mkdir(parents=True, exist_ok=True)
    marker = marker_for(site, req.digest)
    if marker.exists():
        return True
    for old in markers(site):
        old.unlink()
    req_file = log_path.with_name("requirements.txt")  # beside the log, not in the package
    req_file.parent.mkdir(parents=True, exist_ok=True)  # the attempt's log dir: made lazily
    req_file.write_text(req.text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIREPOOL_")}
    env["HOME"] = str(work)
    with open(log_path, "ab") as log, open(req_file, "rb") as req_fh:
        os.chmod(req_file, 0o644)
        try:
            proc = subprocess.run(
                installer_command(Path(f"/dev/fd/{req_fh.fileno()}"), site),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=work,
                env=env,
                timeout=timeout,
                check=False,
                pass_fds=[req_fh.fileno()],
                user=user[0] if user else None,
                group=user[1] if user else None,
                extra_groups=[] if user else None,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DependencyInstallFailedError(f"requirements install: {exc}") from None
    if proc.returncode != 0:
        tail = log_path.read_bytes()[-2000:].decode(errors="replace")
        raise DependencyInstallFailedError(
            f"requirements install exited {proc.returncode}: {tail}", field="requirements"
        )
    marker.write_text(req.digest + "\n")
    return False

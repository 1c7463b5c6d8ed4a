"""Running a command of an unpacked image the way a container runtime would: its own mount
and PID namespaces (a /proc of its own, the host's /dev bound in), chrooted into the image,
in the image's working directory, as the image's user, with the image's environment. The
host's network stays shared, so a test reaches the agent on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from firepool.testing.host import needs

#: Mounts, then chroot + cwd + uid/gid through util-linux's unshare (no namespace of its own).
#: The shell stays the namespace's first process rather than exec'ing the image's command:
#: `--kill-child` kills it with its parent, and the kernel then kills every process of the
#: namespace (the image's command changes its uid, which would clear that death signal).
SCRIPT = (
    "root=$1 wd=$2 user=$3 unshare=$4 mount=$5; shift 5; "
    '"$mount" --rbind /dev "$root/dev" && "$mount" -t proc proc "$root/proc" && '
    '"$unshare" --root="$root" --wd="$wd" --setuid "${user%%:*}" --setgid "${user#*:}" '
    '-- "$@"'
)


def _tools() -> tuple[str, str]:
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if unshare is None or mount is None:
        needs("util-linux's unshare and mount")
    assert unshare is not None and mount is not None
    return unshare, mount


def require_containers() -> None:
    """Root and mount + PID namespaces, or the test is skipped (failed under CI=true)."""
    if os.geteuid() != 0:
        needs("root (chroot into the image, mount and PID namespaces)")
    unshare, _ = _tools()
    probe = subprocess.run(
        [unshare, "--mount", "--pid", "--fork", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        needs(f"mount and PID namespaces ({probe.stderr.strip()})")
    help_text = subprocess.run([unshare, "--help"], capture_output=True, text=True).stdout
    if "--root" not in help_text or "--setuid" not in help_text:
        needs("util-linux unshare with --root and --setuid (2.32 or newer)")


def command(root: Path, config: Mapping[str, Any], argv: Sequence[str] | None = None) -> list[str]:
    """The host command that runs `argv` (default: the image's Cmd) inside the image."""
    unshare, mount = _tools()
    args = list(argv) if argv is not None else [*config.get("Entrypoint", []), *config["Cmd"]]
    return [
        unshare, "--mount", "--pid", "--fork", "--kill-child", "/bin/sh", "-c", SCRIPT, "sh",
        str(root), config.get("WorkingDir", "/"), config.get("User", "0:0"), unshare, mount,
        *args,
    ]  # fmt: skip


def environment(config: Mapping[str, Any], extra: Mapping[str, str] = {}) -> dict[str, str]:
    """The image's environment (nothing of this process's), plus what the pod spec adds."""
    env = dict(item.split("=", 1) for item in config.get("Env", []))
    env.update(extra)
    return env


def run(
    root: Path, config: Mapping[str, Any], argv: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(root, config, argv), env=environment(config), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def image_pid(outer: int) -> int | None:
    """The host pid of the image's command: the child of the namespace's shell, itself the
    child of `unshare --fork` (pid `outer`)."""
    for shell in _children(outer):
        for child in _children(shell):
            return child
    return None

"""Custom images for local pods: an environment directory that can run the pod agent.

On the local backend a custom image is a directory with `bin/python` (see the catalog's
`[local_images]`). Tests need one that runs `firepool.agent` yet is visibly not the broker's
own interpreter: a fresh virtual environment whose `.pth` file lends it this interpreter's
import path (a venv made with --system-site-packages from inside a venv would see the base
interpreter's packages, not this one's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DIGEST = "sha256:" + "5e" * 32


def agent_environment(where: Path) -> Path:
    """Create (once) a virtual environment at `where` whose python can run the pod agent."""
    python = where / "bin" / "python"
    if python.exists():
        return where
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    borrowed = [p for p in sys.path if p and Path(p).is_dir()]
    (Path(site) / "firepool-borrowed.pth").write_text("\n".join(borrowed) + "\n")
    return where

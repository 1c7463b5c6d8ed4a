"""A small real filesystem that a test can fill up, for disk-full faults.

A tmpfs of a few hundred KiB mounted on a temporary directory: writes past its size fail with
ENOSPC exactly as on a full data disk. Mounting needs root (CAP_SYS_ADMIN); where it is
refused the test skips, and fails when CI=true.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(size_kib: int) -> Iterator[Path]:
    """A fresh tmpfs of `size_kib` KiB, unmounted and removed on exit."""
    where = Path(tempfile.mkdtemp(prefix="firepool-small-disk-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        where.rmdir()
        problem = f"cannot mount a small tmpfs here: {mounted.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {problem}")
        pytest.skip(problem)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


def fill(directory: Path) -> Path:
    """Write a file in `directory` until its disk is full; returns it (delete it to free)."""
    filler = directory / "filler"
    chunk = b"\0" * 4096
    with open(filler, "wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                break
    # The last partial page: byte by byte, so not even a small write still fits.
    with open(filler, "ab", buffering=0) as out:
        while True:
            try:
                out.write(b"\0")
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                return filler

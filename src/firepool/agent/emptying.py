"""Emptying a directory that a job could write to, without following what it planted there.

Of its own because both the reset (`agent/reset.py`) and the scratch set-up
(`agent/isolation.py`) need it, and neither may import the other."""

from __future__ import annotations

import os
from pathlib import Path


def _empty_fd(fd: int) -> int:
    removed = 0
    with os.scandir(fd) as it:
        entries = list(it)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                removed += _empty_fd(sub)
            finally:
                os.close(sub)
            os.rmdir(entry.name, dir_fd=fd)
        else:
            os.unlink(entry.name, dir_fd=fd)
        removed += 1
    return removed


def empty_dir(path: Path) -> int:
    """Remove everything inside `path`, never following symlinks; returns entries removed.
    Works on directory descriptors: no path is resolved twice, and a symlink planted by a job
    cannot redirect the deletion outside the pod."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True)
        return 0
    try:
        return _empty_fd(fd)
    finally:
        os.close(fd)

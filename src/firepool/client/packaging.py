"""Code packages on the client side: a directory becomes a zip whose bytes depend only on the
tree's contents, so its SHA-256 digest names the code and an unchanged tree is uploaded once.

Determinism: members in sorted POSIX path order, a fixed timestamp (1980-01-01, the zip
epoch), a fixed creator system, permissions reduced to 0644 or 0755 (the executable bit is
content, the rest is the local umask), one compression level. Byte-code caches and VCS folders
(`__pycache__`, `*.pyc`, `.git`) are left out: running the code locally must not change its
digest. Symlinks and special files are refused before anything is sent, with the same
`BadPackageError` the broker would answer, because the broker refuses them anyway.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from firepool.model import BadPackageError
from firepool.packages.zipguard import check_zip

_EPOCH = (1980, 1, 1, 0, 0, 0)
_UNIX = 3
_SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn"})
_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True, slots=True)
class Package:
    """Zip bytes ready to upload, with the digest the broker will compute for them."""

    data: bytes
    digest: str  # "sha256:<hex>"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _members(root: Path) -> list[tuple[str, Path, int]]:
    """(archive name, path, mode) of every file under `root`, sorted; refuses links."""
    found: list[tuple[str, Path, int]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for name in list(dirnames):
            if (here / name).is_symlink():
                rel = (here / name).relative_to(root).as_posix()
                raise BadPackageError(f"{rel} is a symlink", field="package")
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in filenames:
            if name.endswith(_SKIP_SUFFIXES):
                continue
            path = here / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                raise BadPackageError(f"{rel} is a symlink", field="package")
            if not stat.S_ISREG(info.st_mode):
                raise BadPackageError(f"{rel} is not a regular file", field="package")
            mode = 0o755 if info.st_mode & stat.S_IXUSR else 0o644
            found.append((rel, path, mode))
    found.sort(key=lambda member: member[0])
    return found


def zip_directory(root: str | os.PathLike[str]) -> Package:
    """Zip a directory deterministically (see the module docstring)."""
    base = Path(root)
    if base.is_symlink():
        raise BadPackageError(f"{base} is a symlink", field="package")
    if not base.is_dir():
        raise BadPackageError(f"{base} is not a directory", field="package")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, path, mode in _members(base):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.create_system = _UNIX
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes(), compresslevel=6)
    data = buffer.getvalue()
    return Package(data, digest_of(data))


def load_package(source: str | os.PathLike[str]) -> Package:
    """A directory is zipped; a zip file is checked locally (the broker's own guard) and sent
    as it is, so a bad archive fails before the upload rather than after it."""
    path = Path(source)
    if path.is_dir():
        return zip_directory(path)
    if not path.is_file():
        raise BadPackageError(f"{path}: no such directory or zip file", field="package")
    check_zip(path)
    data = path.read_bytes()
    return Package(data, digest_of(data))

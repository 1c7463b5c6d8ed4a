"""Unpack a job package into the workspace with the upload side's guards.

The broker checks packages at upload, but the agent checks again at unpack: the bytes came over
the network and the pod must not trust them. Refused: absolute paths, `..` components, drive or
backslash tricks, symlinks and other special files, more than `max_entries` entries, and more
than `max_bytes` actually written (counted while writing, so a lying header cannot bomb us).
Stdlib only, like the rest of the agent.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path, PurePosixPath

from firepool.model import BadPackageError, PayloadTooLargeError

MAX_EXTRACTED_BYTES = 2 * 1000**3
MAX_ENTRIES = 100_000
_CHUNK = 1 << 20


def safe_member_path(name: str) -> PurePosixPath:
    """The relative path an entry may be written to, or BadPackageError."""
    if "\\" in name or "\0" in name:
        raise BadPackageError(f"package entry {name!r}: illegal character", field="package")
    path = PurePosixPath(name)
    if path.is_absolute() or (path.parts and ":" in path.parts[0]):
        raise BadPackageError(f"package entry {name!r} is absolute", field="package")
    if any(part == ".." for part in path.parts):
        raise BadPackageError(f"package entry {name!r} escapes the workspace", field="package")
    return path


def _kind(info: zipfile.ZipInfo) -> int:
    return stat.S_IFMT(info.external_attr >> 16)


def unpack(
    archive: str | os.PathLike[str],
    dest: Path,
    *,
    max_bytes: int = MAX_EXTRACTED_BYTES,
    max_entries: int = MAX_ENTRIES,
) -> int:
    """Extract `archive` into `dest` (which should be empty); returns bytes written."""
    written = 0
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BadPackageError(f"package is not a zip archive: {exc}", field="package") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > max_entries:
            raise BadPackageError(
                f"package has {len(infos)} entries (limit {max_entries})", field="package"
            )
        root = dest.resolve()
        for info in infos:
            rel = safe_member_path(info.filename)
            kind = _kind(info)
            if kind == stat.S_IFLNK:
                raise BadPackageError(
                    f"package entry {info.filename!r} is a symlink", field="package"
                )
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise BadPackageError(
                    f"package entry {info.filename!r} is not a file", field="package"
                )
            target = root.joinpath(*rel.parts) if rel.parts else root
            if info.is_dir() or kind == stat.S_IFDIR:
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                while chunk := src.read(_CHUNK):
                    written += len(chunk)
                    if written > max_bytes:
                        raise PayloadTooLargeError(
                            f"package expands past {max_bytes} bytes", field="package"
                        )
                    out.write(chunk)
    return written

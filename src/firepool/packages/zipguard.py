"""Zip checks shared by the broker (at upload) and the in-pod agent (at unpack).

Stdlib and `firepool.model` only, so the agent can import it without the broker's stack. A
package is refused, with `BadPackageError` naming the member, when it is not a readable zip,
when a member is a symlink or a special file, when a member's path is absolute or climbs out
with `..`, or when it would extract to more than the cap (2 GB by default: a zip bomb guard).
Declared sizes are checked first (cheap), then every member is actually decompressed against
its CRC, because a crafted header can lie about sizes.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from firepool.model import BadPackageError

MAX_COMPRESSED_BYTES = 512 * 1024 * 1024
MAX_EXTRACTED_BYTES = 2_000_000_000
MAX_MEMBERS = 100_000
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class ZipSummary:
    members: int
    extracted_bytes: int


def _member_problem(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    if "\x00" in name:
        return "has a NUL byte in its name"
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind == stat.S_IFLNK:
        return "is a symlink"
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return "is not a regular file or directory"
    unified = name.replace("\\", "/")
    if unified.startswith("/") or (len(unified) > 1 and unified[1] == ":"):
        return "has an absolute path"
    if ".." in PurePosixPath(unified).parts:
        return "escapes the package directory with '..'"
    return None


def _open(source: str | os.PathLike[str] | IO[bytes]) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(source)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as err:
        raise BadPackageError(f"not a readable zip archive: {err}", field="package") from None


def check_zip(
    source: str | os.PathLike[str] | IO[bytes],
    *,
    max_extracted: int = MAX_EXTRACTED_BYTES,
    max_members: int = MAX_MEMBERS,
) -> ZipSummary:
    """Validate a whole archive without writing anything; raise `BadPackageError` if unsafe."""
    with _open(source) as archive:
        members = archive.infolist()
        if len(members) > max_members:
            raise BadPackageError(
                f"package has {len(members)} members, more than {max_members}", field="package"
            )
        declared = 0
        for info in members:
            problem = _member_problem(info)
            if problem is not None:
                raise BadPackageError(f"member {info.filename!r} {problem}", field="package")
            declared += info.file_size
            if declared > max_extracted:
                raise BadPackageError(
                    f"package would extract to more than {max_extracted} bytes", field="package"
                )
        actual = 0
        for info in members:
            if info.is_dir():
                continue
            try:
                with archive.open(info) as member:
                    while chunk := member.read(_CHUNK):
                        actual += len(chunk)
                        if actual > max_extracted:
                            raise BadPackageError(
                                f"package extracts to more than {max_extracted} bytes",
                                field="package",
                            )
            except BadPackageError:
                raise
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as err:
                raise BadPackageError(
                    f"member {info.filename!r} is corrupt: {err}", field="package"
                ) from None
        return ZipSummary(len(members), actual)


def extract_zip(
    source: str | os.PathLike[str] | IO[bytes],
    dest: str | os.PathLike[str],
    *,
    max_extracted: int = MAX_EXTRACTED_BYTES,
) -> ZipSummary:
    """Check, then unpack into `dest` (which must exist). Every target path is re-checked to
    lie inside `dest`, and the byte cap holds while writing, whatever the headers claim."""
    summary = check_zip(source, max_extracted=max_extracted)
    if hasattr(source, "seek"):
        source.seek(0)
    root = Path(dest).resolve()
    written = 0
    with _open(source) as archive:
        for info in archive.infolist():
            target = (root / info.filename.replace("\\", "/")).resolve()
            if target != root and root not in target.parents:
                raise BadPackageError(f"member {info.filename!r} escapes {root}", field="package")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as member, open(target, "wb") as out:
                while chunk := member.read(_CHUNK):
                    written += len(chunk)
                    if written > max_extracted:
                        raise BadPackageError(
                            f"package extracts to more than {max_extracted} bytes",
                            field="package",
                        )
                    out.write(chunk)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode & 0o755 | 0o600)
    return summary


__all__ = [
    "MAX_COMPRESSED_BYTES",
    "MAX_EXTRACTED_BYTES",
    "ZipSummary",
    "check_zip",
    "extract_zip",
]

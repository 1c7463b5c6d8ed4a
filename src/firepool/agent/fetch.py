"""Fetch a package over HTTP, streamed, into the pod's package cache.

The digest is checked while streaming and the file is renamed into the cache only when it
matches, so the cache holds verified archives only and is safe to keep across resets (a
read-only cache in the paper's sense): the next job of the same caller with the same package
skips the download. The cache keeps the few most recent packages.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

from firepool.model import BadPackageError, PayloadTooLargeError
from firepool.protocol import LaunchFailedError, PackageRef

MAX_PACKAGE_BYTES = 512 * 1024**2
KEEP_PACKAGES = 8
_CHUNK = 1 << 20


def cached_path(cache: Path, digest: str) -> Path:
    return cache / (digest.removeprefix("sha256:") + ".zip")


def fetch(ref: PackageRef, cache: Path, *, timeout: float = 300.0) -> tuple[Path, bool]:
    """The verified archive for `ref` (path, was it cached)."""
    target = cached_path(cache, ref.digest)
    if target.exists():
        os.utime(target)  # mark recently used
        return target, True
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".part{os.getpid()}")
    headers = {"Authorization": ref.authorization} if ref.authorization else {}
    hasher = hashlib.sha256()
    size = 0
    try:
        with (
            urllib.request.urlopen(
                urllib.request.Request(ref.url, headers=headers), timeout=timeout
            ) as resp,
            open(partial, "wb") as out,
        ):
            while chunk := resp.read(_CHUNK):
                size += len(chunk)
                if size > MAX_PACKAGE_BYTES:
                    raise PayloadTooLargeError(
                        f"package larger than {MAX_PACKAGE_BYTES} bytes", field="package"
                    )
                hasher.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise LaunchFailedError(
            f"cannot fetch package {ref.digest}: {exc}", field="package"
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    got = "sha256:" + hasher.hexdigest()
    if got != ref.digest:
        partial.unlink()
        raise BadPackageError(f"package digest mismatch: got {got}", field="package")
    os.replace(partial, target)
    _prune(cache)
    return target, False


def _prune(cache: Path) -> None:
    archives = sorted(cache.glob("*.zip"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEEP_PACKAGES:]:
        with contextlib.suppress(OSError):
            old.unlink()

"""`PackageStore`: where uploaded code packages live, addressed by their SHA-256.

The disk store is the default; an S3-compatible store can implement the same protocol later.
An upload is a two-step object so that the API can stream the body in and refuse it at any
point (too large, not a safe zip) with nothing kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredPackage:
    digest: str  # "sha256:<hex>"
    size: int
    created: bool  # False when an identical package was already stored


class Upload(Protocol):
    def write(self, chunk: bytes) -> None:
        """Append bytes; raises `PayloadTooLargeError` past the compressed-size cap."""
        ...

    def commit(self) -> StoredPackage:
        """Validate the zip and keep it; raises `BadPackageError` (and keeps nothing)."""
        ...

    def abort(self) -> None: ...


class PackageStore(Protocol):
    max_bytes: int

    def begin(self) -> Upload: ...

    def path(self, digest: str) -> Path | None:
        """Local file of a stored package, or None if it is not stored."""
        ...

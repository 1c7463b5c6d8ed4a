"""Content-addressed package blobs on local disk, under `<data-dir>/packages`.

Layout: `sha256/<first two hex>/<hex>.zip`. Uploads stream into `tmp/` while hashing; only a
validated archive is renamed into place (an atomic rename on one filesystem), so a reader
never sees a partial blob and a rejected upload leaves nothing behind. Identical uploads land
on the same name and are kept once. A full disk is a `StoreUnavailableError` (503, try again
later), with the partial upload removed: a blob is either whole under its name or absent.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from firepool.model import PayloadTooLargeError, StoreUnavailableError
from firepool.packages.protocol import StoredPackage
from firepool.packages.zipguard import MAX_COMPRESSED_BYTES, MAX_EXTRACTED_BYTES, check_zip

_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")


class DiskUpload:
    def __init__(self, store: DiskPackageStore) -> None:
        self._store = store
        fd, name = tempfile.mkstemp(dir=store.tmp_dir, suffix=".part")
        self._file = os.fdopen(fd, "wb")
        self._path = Path(name)
        self._hash = hashlib.sha256()
        self._size = 0
        self._done = False

    def write(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self._store.max_bytes:
            self.abort()
            raise PayloadTooLargeError(
                f"package exceeds {self._store.max_bytes} bytes compressed", field="package"
            )
        self._hash.update(chunk)
        with self._disk_full_is_unavailable():
            self._file.write(chunk)

    def commit(self) -> StoredPackage:
        try:
            with self._disk_full_is_unavailable():
                return self._commit()
        finally:
            self.abort()

    @contextlib.contextmanager
    def _disk_full_is_unavailable(self) -> Iterator[None]:
        try:
            yield
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.abort()
            raise StoreUnavailableError(
                f"the disk holding the package store is full ({self._store.root})",
                field="package",
                retry_after_s=30.0,
            ) from err

    def _commit(self) -> StoredPackage:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        check_zip(self._path, max_extracted=self._store.max_extracted)
        hexdigest = self._hash.hexdigest()
        target = self._store.blob_path(hexdigest)
        created = not target.exists()
        if created:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._path, target)
        return StoredPackage(f"sha256:{hexdigest}", self._size, created)

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        with contextlib.suppress(OSError):  # a full disk fails the close's flush too
            self._file.close()
        self._path.unlink(missing_ok=True)


class DiskPackageStore:
    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int = MAX_COMPRESSED_BYTES,
        max_extracted: int = MAX_EXTRACTED_BYTES,
    ) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.max_extracted = max_extracted
        self.tmp_dir = self.root / "tmp"
        self.tmp_dir.mkdir(parents=True, exist_ok=True)

    def blob_path(self, hexdigest: str) -> Path:
        return self.root / "sha256" / hexdigest[:2] / f"{hexdigest}.zip"

    def begin(self) -> DiskUpload:
        return DiskUpload(self)

    def path(self, digest: str) -> Path | None:
        match = _DIGEST.match(digest)
        if match is None:
            return None
        blob = self.blob_path(match.group(1))
        return blob if blob.is_file() else None

    def blobs(self) -> list[Path]:
        """Every stored blob (tests use it to prove that rejections keep nothing)."""
        return sorted((self.root / "sha256").glob("*/*.zip"))

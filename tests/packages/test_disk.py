"""The content-addressed blob store: dedup, size cap, nothing kept on rejection."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from firepool.model import BadPackageError, PayloadTooLargeError
from firepool.packages import DiskPackageStore, StoredPackage


def zip_bytes(**members: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def upload(store: DiskPackageStore, data: bytes, chunk: int = 1000) -> StoredPackage:
    pending = store.begin()
    for at in range(0, len(data), chunk):
        pending.write(data[at : at + chunk])
    return pending.commit()


def test_identical_uploads_are_stored_once(tmp_path: Path) -> None:
    store = DiskPackageStore(tmp_path)
    blob = zip_bytes(main=b"print(1)")
    first = upload(store, blob)
    second = upload(store, blob)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    assert first.digest == second.digest == digest
    assert (first.created, second.created) == (True, False)
    path = store.path(digest)
    assert path is not None and path.read_bytes() == blob
    assert store.blobs() == [path]
    assert list(store.tmp_dir.iterdir()) == []


def test_oversized_upload_is_cut_off_and_forgotten(tmp_path: Path) -> None:
    store = DiskPackageStore(tmp_path, max_bytes=5000)
    with pytest.raises(PayloadTooLargeError):
        upload(store, zip_bytes(big=bytes(range(256)) * 100))
    assert store.blobs() == [] and list(store.tmp_dir.iterdir()) == []


def test_bad_zip_is_refused_and_forgotten(tmp_path: Path) -> None:
    store = DiskPackageStore(tmp_path)
    with pytest.raises(BadPackageError):
        upload(store, b"PK\x03\x04 definitely not a zip")
    assert store.blobs() == [] and list(store.tmp_dir.iterdir()) == []


def test_unknown_or_malformed_digests_have_no_path(tmp_path: Path) -> None:
    store = DiskPackageStore(tmp_path)
    assert store.path("sha256:" + "0" * 64) is None
    assert store.path("../../etc/passwd") is None

"""The package store's disk full: a typed `StoreUnavailableError`, nothing half-written."""

from __future__ import annotations

import io
import os
import zipfile

import pytest

from firepool.model import StoreUnavailableError
from firepool.packages.disk import DiskPackageStore
from firepool.testing.disk import fill, small_disk


def big_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("main.py", "print('hi')\n")
        archive.writestr("data.bin", os.urandom(256 * 1024))  # incompressible
    return buffer.getvalue()


def upload(store: DiskPackageStore, data: bytes) -> str:
    pending = store.begin()
    try:
        for start in range(0, len(data), 64 * 1024):
            pending.write(data[start : start + 64 * 1024])
        return pending.commit().digest
    finally:
        pending.abort()


def test_a_full_package_disk_refuses_the_upload_and_keeps_nothing_of_it() -> None:
    data = big_zip()
    with small_disk(1024) as disk:
        store = DiskPackageStore(disk / "packages")
        filler = fill(disk)
        with pytest.raises(StoreUnavailableError, match="full") as caught:
            upload(store, data)
        assert caught.value.field == "package" and caught.value.retry_after_s > 0
        assert store.blobs() == [] and list(store.tmp_dir.iterdir()) == []
        filler.unlink()
        digest = upload(store, data)  # the same upload, once there is room
        path = store.path(digest)
        assert path is not None and path.read_bytes() == data

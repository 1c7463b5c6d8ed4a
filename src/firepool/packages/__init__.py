"""Code packages: content-addressed zip blobs and the zip safety checks."""

from __future__ import annotations

from firepool.packages.disk import DiskPackageStore
from firepool.packages.protocol import PackageStore, StoredPackage, Upload
from firepool.packages.zipguard import check_zip, extract_zip

__all__ = [
    "DiskPackageStore",
    "PackageStore",
    "StoredPackage",
    "Upload",
    "check_zip",
    "extract_zip",
]

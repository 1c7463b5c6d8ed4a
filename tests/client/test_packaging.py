"""Packages: a directory zips to the same bytes every time, is uploaded once per client, and
unsafe trees are refused before anything is sent."""

from __future__ import annotations

import io
import os
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from firepool.client import Client, zip_directory
from firepool.model import BadPackageError
from firepool.testing.broker import LiveBroker


def make_tree(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "main.py").write_text("print('hello')\n")
    (root / "pkg" / "sub" / "data.txt").write_text("data\n")
    (root / "pkg" / "run.sh").write_text("#!/bin/sh\n")
    (root / "pkg" / "run.sh").chmod(0o755)
    return root / "pkg"


def test_same_tree_same_digest_and_a_change_changes_it(tmp_path: Path) -> None:
    one = make_tree(tmp_path / "a")
    two = make_tree(tmp_path / "b")
    # Different timestamps, umask-level permissions, creation order and byte-code caches.
    os.utime(two / "main.py", (time.time() - 10_000,) * 2)
    (two / "sub" / "data.txt").chmod(0o600)
    (two / "__pycache__").mkdir()
    (two / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\0" * 16)
    first, second = zip_directory(one), zip_directory(two)
    assert first.digest == second.digest and first.data == second.data
    names = zipfile.ZipFile(io.BytesIO(first.data)).namelist()
    assert names == ["main.py", "run.sh", "sub/data.txt"]
    (two / "main.py").write_text("print('hello!')\n")
    assert zip_directory(two).digest != first.digest
    (one / "run.sh").chmod(0o644)
    assert zip_directory(one).digest != first.digest  # the executable bit is content


def test_symlinks_are_refused_before_upload(
    client: Client, broker: LiveBroker, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path)
    (tree / "link.py").symlink_to(tree / "main.py")
    with pytest.raises(BadPackageError) as caught:
        client.upload_package(tree)
    assert "link.py" in caught.value.message and caught.value.field == "package"
    (tree / "link.py").unlink()
    (tree / "sub" / "loop").symlink_to(tree, target_is_directory=True)
    with pytest.raises(BadPackageError):
        client.submit("cpu", ["python", "main.py"], package=tree)
    assert broker.packages.blobs() == [] and client.list() == []


def test_a_directory_is_uploaded_once_and_reused(
    client: Client, broker: LiveBroker, tmp_path: Path
) -> None:
    uploads: list[str] = []

    def count(request: httpx.Request) -> None:
        if request.url.path == "/v1/packages":
            uploads.append(request.method)

    client._http.event_hooks["request"].append(count)
    tree = make_tree(tmp_path)
    first = client.submit("cpu", ["python", "main.py"], package=tree)
    second = client.submit("cpu", ["python", "main.py"], package=str(tree))
    digest = client.upload_package(tree)
    assert first.spec.package == second.spec.package == digest == zip_directory(tree).digest
    assert uploads == ["POST"] and len(broker.packages.blobs()) == 1
    assert client.upload_package(digest) == digest  # a digest passes through
    with Client(broker.url, broker.tokens["bob"]) as bob:
        assert bob.upload_package(tree) == digest  # the broker dedups across callers
    assert len(broker.packages.blobs()) == 1


def test_a_zip_file_is_checked_locally_and_sent_as_is(client: Client, tmp_path: Path) -> None:
    good = tmp_path / "good.zip"
    good.write_bytes(zip_directory(make_tree(tmp_path)).data)
    assert client.upload_package(good) == zip_directory(tmp_path / "pkg").digest
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("../escape.py", "x")
    with pytest.raises(BadPackageError):
        client.upload_package(evil)
    with pytest.raises(BadPackageError):
        client.upload_package(tmp_path / "missing")

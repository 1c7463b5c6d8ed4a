"""Late binding pieces on their own: the unpack guard, the package cache, requirement markers."""

from __future__ import annotations

import hashlib
import io
import stat
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from firepool.agent import deps, fetch
from firepool.agent.unpack import unpack
from firepool.model import BadPackageError, PayloadTooLargeError
from firepool.protocol import (
    DependencyInstallFailedError,
    PackageRef,
    RequirementsRef,
    sha256_digest,
)

pytestmark = pytest.mark.timeout(120)


def make_zip(members: dict[str, bytes], symlink: str | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return buf.getvalue()


def test_unpack_writes_files(tmp_path: Path) -> None:
    archive = tmp_path / "p.zip"
    archive.write_bytes(make_zip({"main.py": b"print(1)", "pkg/mod.py": b"x = 1"}))
    dest = tmp_path / "work"
    dest.mkdir()
    assert unpack(archive, dest) == len(b"print(1)") + len(b"x = 1")
    assert (dest / "pkg" / "mod.py").read_bytes() == b"x = 1"


@pytest.mark.parametrize(
    "members,symlink",
    [
        ({"../evil": b"x"}, None),
        ({"/etc/evil": b"x"}, None),
        ({"a/../../evil": b"x"}, None),
        ({"C:/evil": b"x"}, None),
        ({"ok.py": b"x"}, "link"),
    ],
)
def test_unpack_refuses_escapes_and_symlinks(
    tmp_path: Path, members: dict[str, bytes], symlink: str | None
) -> None:
    archive = tmp_path / "p.zip"
    archive.write_bytes(make_zip(members, symlink))
    dest = tmp_path / "work"
    dest.mkdir()
    with pytest.raises(BadPackageError):
        unpack(archive, dest)
    assert not (tmp_path / "evil").exists()


def test_unpack_caps_written_bytes(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(make_zip({"zeros": b"\0" * 5_000_000}))
    dest = tmp_path / "work"
    dest.mkdir()
    with pytest.raises(PayloadTooLargeError):
        unpack(archive, dest, max_bytes=1_000_000)


def test_unpack_refuses_non_zip(tmp_path: Path) -> None:
    archive = tmp_path / "x.zip"
    archive.write_bytes(b"not a zip")
    with pytest.raises(BadPackageError):
        unpack(archive, tmp_path)


class _Blobs:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.hits = 0
        blobs = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                blobs.hits += 1
                data = blobs.blobs.get(self.path.rsplit("/", 1)[-1])
                if data is None or self.headers.get("Authorization") != "Bearer t":
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def put(self, data: bytes) -> PackageRef:
        digest = sha256_digest(data)
        self.blobs[digest] = data
        port = self.server.server_address[1]
        return PackageRef(digest=digest, url=f"http://127.0.0.1:{port}/v1/packages/{digest}",
                          authorization="Bearer t")  # fmt: skip


@pytest.fixture()
def blobs() -> Iterator[_Blobs]:
    b = _Blobs()
    yield b
    b.server.shutdown()
    b.server.server_close()


def test_fetch_verifies_digest_and_caches(tmp_path: Path, blobs: _Blobs) -> None:
    ref = blobs.put(make_zip({"main.py": b"print(1)"}))
    path, cached = fetch.fetch(ref, tmp_path)
    assert not cached and path.exists()
    _, cached = fetch.fetch(ref, tmp_path)
    assert cached and blobs.hits == 1
    lying = PackageRef(digest="sha256:" + "0" * 64, url=ref.url.replace(ref.digest, "x"))
    blobs.blobs["x"] = b"other"
    with pytest.raises(Exception) as err:
        fetch.fetch(lying.model_copy(update={"authorization": "Bearer t"}), tmp_path)
    assert isinstance(err.value, BadPackageError)
    assert list(tmp_path.glob("*.part*")) == []


def _wheel(dir: Path, version: str) -> Path:
    """A minimal pure-Python wheel, built by hand so the test needs no network."""
    name = f"fpdemo-{version}-py3-none-any.whl"
    path = dir / name
    dist = f"fpdemo-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fpdemo.py", f"VERSION = {version!r}\n")
        meta = f"Metadata-Version: 2.1\nName: fpdemo\nVersion: {version}\n"
        zf.writestr(f"{dist}/METADATA", meta)
        wheel = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        zf.writestr(f"{dist}/WHEEL", wheel)
        zf.writestr(f"{dist}/RECORD", "")
    return path


def test_requirements_markers(tmp_path: Path) -> None:
    site, work, log = tmp_path / "site", tmp_path / "work", tmp_path / "logs" / "install.log"
    work.mkdir()
    log.parent.mkdir()
    one = RequirementsRef.of(f"--no-index\n{_wheel(tmp_path, '1.0')}\n")
    two = RequirementsRef.of(f"--no-index\n{_wheel(tmp_path, '2.0')}\n")
    assert deps.ensure(one, site, work, log) is False
    assert deps.markers(site) == [deps.marker_for(site, one.digest)]
    assert deps.ensure(one, site, work, log) is True  # same digest: nothing to do
    assert deps.ensure(two, site, work, log) is False
    assert deps.markers(site) == [deps.marker_for(site, two.digest)]
    assert "2.0" in (site / "fpdemo.py").read_text()
    broken = RequirementsRef.of("--no-index\nno-such-package-fp==9\n")
    with pytest.raises(DependencyInstallFailedError):
        deps.ensure(broken, site, work, log)
    assert deps.markers(site) == []  # removed before the install, none written after failure
    assert deps.ensure(two, site, work, log) is False  # going back reinstalls


def test_requirements_digest_must_match() -> None:
    right = "sha256:" + hashlib.sha256(b"x").hexdigest()
    assert RequirementsRef(digest=right, text="x").text == "x"
    assert RequirementsRef.of("x").digest == right
    with pytest.raises(ValueError):
        RequirementsRef(digest="sha256:" + "0" * 64, text="x")
    with pytest.raises(ValueError):  # a well-formed digest, of another text
        RequirementsRef(digest="sha256:" + hashlib.sha256(b"y").hexdigest(), text="x")

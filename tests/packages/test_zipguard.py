"""The zip checks the broker runs at upload and the agent runs at unpack."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest

from firepool.model import BadPackageError
from firepool.packages.zipguard import check_zip, extract_zip


def make_zip(members: dict[str, bytes], *, symlink: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = 0o120777 << 16
            archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def declare_size(blob: bytes, size: int) -> bytes:
    """Rewrite the central directory's uncompressed size of the first member."""
    at = blob.index(b"PK\x01\x02")
    return blob[: at + 24] + struct.pack("<I", size) + blob[at + 28 :]


GOOD = make_zip({"main.py": b"print('hi')\n", "pkg/util.py": b"X = 1\n", "pkg/": b""})


def test_a_plain_package_passes_and_unpacks(tmp_path: Path) -> None:
    summary = check_zip(io.BytesIO(GOOD))
    assert summary.members == 3
    extract_zip(io.BytesIO(GOOD), tmp_path)
    assert (tmp_path / "main.py").read_bytes() == b"print('hi')\n"
    assert (tmp_path / "pkg" / "util.py").read_text() == "X = 1\n"


@pytest.mark.parametrize(
    ("blob", "words"),
    [
        (make_zip({"../evil.py": b"x"}), "'..'"),
        (make_zip({"a/../../evil.py": b"x"}), "'..'"),
        (make_zip({"/etc/cron.d/evil": b"x"}), "absolute"),
        (make_zip({"C:/evil": b"x"}), "absolute"),
        (make_zip({"ok.py": b"x"}, symlink="link"), "symlink"),
        (b"this is not a zip at all", "not a readable zip"),
        (GOOD[: len(GOOD) // 2], "not a readable zip"),
        (declare_size(GOOD, 3_000_000_000), "more than"),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "drive", "symlink", "garbage", "truncated", "bomb"],
)
def test_unsafe_packages_are_refused(blob: bytes, words: str, tmp_path: Path) -> None:
    with pytest.raises(BadPackageError) as err:
        check_zip(io.BytesIO(blob))
    assert words in err.value.message and err.value.field == "package"
    with pytest.raises(BadPackageError):
        extract_zip(io.BytesIO(blob), tmp_path)
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_real_extracted_size_is_capped_not_just_declared() -> None:
    bomb = make_zip({"zeros.bin": b"\0" * 2_000_000})
    assert len(bomb) < 10_000
    with pytest.raises(BadPackageError, match="more than"):
        check_zip(io.BytesIO(bomb), max_extracted=1_000_000)
    lying = declare_size(bomb, 10)  # header claims 10 bytes, data inflates to 2 MB
    with pytest.raises(BadPackageError):
        check_zip(io.BytesIO(lying), max_extracted=1_000_000)


def test_corrupt_member_data_is_refused() -> None:
    blob = bytearray(make_zip({"main.py": b"print('hello world')\n" * 50}))
    data_at = blob.index(b"main.py") + len("main.py") + 5
    blob[data_at] ^= 0xFF
    with pytest.raises(BadPackageError):
        check_zip(io.BytesIO(bytes(blob)))

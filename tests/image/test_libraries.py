"""Where each shared library lands: the loader's own directories kept, anything else (a
pyenv's libpython) moved to one of them, /lib spelled below the merged /usr."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from firepool.image import RootfsError
from firepool.image.interpreter import executable
from firepool.image.libraries import in_image, shared_libraries

MULTIARCH = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"


def test_libraries_land_where_the_loader_looks_without_a_cache() -> None:
    assert in_image(f"/lib/{MULTIARCH}/libc.so.6") == f"usr/lib/{MULTIARCH}/libc.so.6"
    assert in_image(f"/usr/lib/{MULTIARCH}/libz.so.1") == f"usr/lib/{MULTIARCH}/libz.so.1"
    assert in_image("/lib64/ld-linux-x86-64.so.2") == "usr/lib64/ld-linux-x86-64.so.2"
    assert in_image("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0") == (
        "usr/lib/libpython3.11.so.1.0"
    )
    assert in_image("/usr/local/lib/libpython3.11.so.1.0") == "usr/lib/libpython3.11.so.1.0"


def test_the_interpreter_needs_libc_and_a_loader() -> None:
    found = shared_libraries([executable()])
    names = [lib.image.rsplit("/", 1)[1] for lib in found]
    assert "libc.so.6" in names
    assert any(name.startswith("ld-linux") for name in names)
    assert all(lib.host.is_file() for lib in found)


def test_an_object_ldd_cannot_read_is_an_error(tmp_path: Path) -> None:
    text = tmp_path / "not-elf.so"
    text.write_text("hello\n")
    with pytest.raises(RootfsError, match="No such file"):
        shared_libraries([tmp_path / "missing.so"])
    with pytest.raises(RootfsError, match="not a dynamic"):
        shared_libraries([executable(), text])

"""The tree of a layer: paths normalised, parents made, two wishes for one path refused, and
symlinks followed as the kernel follows them inside the container."""

from __future__ import annotations

import pytest

from firepool.image import RootfsError
from firepool.image.entries import Tree


def test_parents_are_made_and_may_be_declared_later_with_their_owner() -> None:
    tree = Tree()
    tree.file("/var/lib/firepool/pod/../x", data=b"x")
    assert [e.path for e in tree.entries()] == ["var", "var/lib", "var/lib/firepool",
                                                "var/lib/firepool/x"]  # fmt: skip
    tree.dir("var/lib/firepool", uid=10001, gid=10001)
    assert tree.get("/var/lib/firepool/") == tree.get("var/lib/firepool")
    entry = tree.get("var/lib/firepool")
    assert entry is not None and entry.uid == 10001


def test_one_path_wanted_two_ways_is_an_error() -> None:
    tree = Tree()
    tree.file("etc/hosts", data=b"a")
    tree.file("etc/hosts", data=b"a")  # the same wish twice is one entry
    with pytest.raises(RootfsError, match="wanted twice"):
        tree.file("etc/hosts", data=b"b")
    tree.dir("tmp", mode=0o1777)
    with pytest.raises(RootfsError, match="wanted twice"):
        tree.dir("tmp")
    with pytest.raises(RootfsError, match="lies under /etc/hosts"):
        tree.file("etc/hosts/x", data=b"")
    tree.symlink("lib", "usr/lib")
    with pytest.raises(RootfsError, match="which is a symlink"):
        tree.file("lib/libc.so.6", data=b"")
    with pytest.raises(RootfsError, match="root"):
        tree.dir("/")


def test_symlinks_resolve_inside_the_image() -> None:
    tree = Tree()
    tree.file("usr/lib/x86_64-linux-gnu/libc.so.6", data=b"libc", mode=0o755)
    tree.symlink("lib", "usr/lib")
    tree.symlink("usr/lib/ssl/cert.pem", "/etc/ssl/certs/ca.crt")
    tree.file("etc/ssl/certs/ca.crt", data=b"ca")
    tree.file("opt/firepool/bin/python3.11", data=b"py", mode=0o755)
    tree.symlink("opt/firepool/bin/python", "python3.11")
    tree.symlink("opt/firepool/bin/up", "../bin/./python")
    tree.symlink("loop", "loop")
    libc = tree.resolve("/lib/x86_64-linux-gnu/libc.so.6")
    assert libc is not None and libc.data == b"libc"
    cert = tree.resolve("lib/ssl/cert.pem")
    assert cert is not None and cert.data == b"ca"
    python = tree.resolve("/opt/firepool/bin/up")
    assert python is not None and python.path == "opt/firepool/bin/python3.11"
    assert tree.resolve("loop") is None
    assert tree.resolve("lib/missing") is None

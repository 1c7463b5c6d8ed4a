"""`write_oci_archive`: any root file system as an OCI archive (the test cluster's `pause`
image is one), read back with every digest checked, the same bytes from the same tree, and an
archive that cannot start its own command refused before anything is written."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from oci_reader import read_archive

from firepool.image import ImageConfig, ImageOutputError, RootfsError, write_oci_archive

PAUSE = ImageConfig(entrypoint=("/pause",), user="65535:65535")


def pause_rootfs(where: Path) -> Path:
    """A stand-in for the static pause binary: any executable file does for the archive."""
    where.mkdir()
    (where / "pause").write_bytes(b"\x7fELF not really\n")
    (where / "pause").chmod(0o755)
    (where / "etc").mkdir()
    (where / "etc" / "hostname").write_text("pause\n")
    (where / "bin").symlink_to("pause")
    return where


def test_a_directory_becomes_an_archive_named_for_containerd(tmp_path: Path) -> None:
    rootfs = pause_rootfs(tmp_path / "rootfs")
    out = tmp_path / "out" / "pause.oci.tar"  # its directory is made on the way
    digest = write_oci_archive(rootfs, PAUSE, "registry.k8s.io/pause:3.10", out)
    image = read_archive(out)
    (entry,) = image.index["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"] == {
        "io.containerd.image.name": "registry.k8s.io/pause:3.10",
        "org.opencontainers.image.ref.name": "3.10",
    }
    assert entry["platform"]["os"] == "linux"
    assert image.config["config"] == {"Entrypoint": ["/pause"], "User": "65535:65535"}
    assert image.config["architecture"] == entry["platform"]["architecture"]
    members = image.members()
    assert list(members) == sorted(members) == ["bin", "etc", "etc/hostname", "pause"]
    assert members["pause"].mode == 0o755 and members["bin"].linkname == "pause"
    assert all(m.mtime == 0 and m.uid == m.gid == 0 and not m.uname for m in members.values())
    assert image.read("pause") == b"\x7fELF not really\n"
    with tarfile.open(out) as outer:
        names = outer.getnames()
    assert names[:2] == ["blobs", "blobs/sha256"] and names[-2:] == ["index.json", "oci-layout"]
    assert not [p for p in out.parent.iterdir() if p != out]  # no scratch left beside it


def test_the_same_tree_gives_the_same_bytes_and_a_changed_one_does_not(tmp_path: Path) -> None:
    rootfs = pause_rootfs(tmp_path / "rootfs")
    first = write_oci_archive(rootfs, PAUSE, "pause:1", tmp_path / "a.tar")
    os.utime(rootfs / "pause", (12345, 12345))  # times and build order never reach the layer
    second = write_oci_archive(rootfs, PAUSE, "pause:1", tmp_path / "b.tar")
    assert first == second
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    (rootfs / "etc" / "hostname").write_text("paused\n")
    assert write_oci_archive(rootfs, PAUSE, "pause:1", tmp_path / "c.tar") != first


def test_a_short_name_is_stored_as_the_kubelet_will_ask_for_it(tmp_path: Path) -> None:
    rootfs = pause_rootfs(tmp_path / "rootfs")
    write_oci_archive(rootfs, PAUSE, "pause", tmp_path / "p.tar")
    (entry,) = read_archive(tmp_path / "p.tar").index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/pause:latest"


def test_an_image_that_cannot_start_its_command_is_refused(tmp_path: Path) -> None:
    rootfs = pause_rootfs(tmp_path / "rootfs")
    out = tmp_path / "x.tar"
    with pytest.raises(RootfsError, match="/nowhere"):
        write_oci_archive(rootfs, ImageConfig(entrypoint=("/nowhere",)), "x:1", out)
    (rootfs / "etc" / "hostname").chmod(0o644)
    with pytest.raises(RootfsError, match="not an executable"):
        write_oci_archive(rootfs, ImageConfig(cmd=("/etc/hostname",)), "x:1", out)
    on_path = ImageConfig(cmd=("pause",), env={"PATH": "/usr/bin:/"})
    write_oci_archive(rootfs, on_path, "x:1", out)  # found on the image's own PATH
    with pytest.raises(RootfsError, match="neither an entrypoint nor a command"):
        write_oci_archive(rootfs, ImageConfig(), "x:1", out)
    with pytest.raises(RootfsError, match="working directory"):
        write_oci_archive(rootfs, ImageConfig(cmd=("/pause",), working_dir="/srv"), "x:1", out)
    with pytest.raises(RootfsError, match="not a directory"):
        write_oci_archive(tmp_path / "missing", PAUSE, "x:1", out)


def test_an_unwritable_output_is_a_typed_error(tmp_path: Path) -> None:
    rootfs = pause_rootfs(tmp_path / "rootfs")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ImageOutputError) as caught:
        write_oci_archive(rootfs, PAUSE, "pause:1", blocker / "pause.tar")
    assert caught.value.field == "output"
    with pytest.raises(ImageOutputError, match="is a directory"):
        write_oci_archive(rootfs, PAUSE, "pause:1", tmp_path)
    if os.geteuid() != 0:  # root writes through a read-only mode anyway
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ImageOutputError):
            write_oci_archive(rootfs, PAUSE, "pause:1", locked / "pause.tar")

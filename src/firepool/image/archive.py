"""An OCI image layout in one tar: what `ctr images import` (and so a kubelet's containerd)
loads without any registry.

    oci-layout                    {"imageLayoutVersion": "1.0.0"}
    index.json                    one manifest, named by the two annotations containerd reads
    blobs/sha256/<digest>         the layer, the image config, the manifest

The archive is written beside its destination and renamed into place, so a failed build never
leaves a half archive under the name a node would import."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from firepool.image.config import ImageConfig, host_architecture
from firepool.image.entries import Tree, from_directory
from firepool.image.errors import ImageOutputError, RootfsError
from firepool.image.layer import EPOCH, MEDIA_TYPE, Layer, write_layer
from firepool.image.reference import parse_reference

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CONTAINERD_NAME = "io.containerd.image.name"
OCI_REF_NAME = "org.opencontainers.image.ref.name"


def write_oci_archive(rootfs: Path, config: ImageConfig, name: str, out: Path) -> str:
    """An image of the directory `rootfs` (one layer, every file owned by root) running
    `config`, written as an OCI archive at `out` and named `name`; its manifest's digest."""
    return write_image(from_directory(rootfs), config, name, out)


def write_image(tree: Tree, config: ImageConfig, name: str, out: Path) -> str:
    """Like `write_oci_archive`, from entries (owners and modes as they say)."""
    reference = parse_reference(name)
    check_runnable(tree, config)
    work = _work_dir(out)
    try:
        layer = write_layer(tree, work / "layer")
        config_blob = _json(_image_config(config, layer))
        manifest_blob = _json(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": _descriptor(CONFIG_TYPE, config_blob),
                "layers": [{"mediaType": MEDIA_TYPE, "digest": layer.digest, "size": layer.size}],
            }
        )
        manifest = _descriptor(MANIFEST_TYPE, manifest_blob)
        manifest["platform"] = {"architecture": host_architecture(), "os": "linux"}
        manifest["annotations"] = {CONTAINERD_NAME: reference.full, OCI_REF_NAME: reference.tag}
        index = _json({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [manifest]})
        blobs: dict[str, bytes | Path] = {
            _hex(_digest(config_blob)): config_blob,
            _hex(_digest(manifest_blob)): manifest_blob,
            _hex(layer.digest): layer.path,
        }
        archive = work / "archive"
        _write_layout(archive, index, blobs)
        os.replace(archive, out)
    except OSError as exc:  # a full disk, a file gone from under the builder
        raise ImageOutputError(f"cannot write {out}: {exc}", field="output") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return str(manifest["digest"])


def check_runnable(tree: Tree, config: ImageConfig) -> None:
    """The image's command must exist in it (on its PATH when not absolute), and so must its
    working directory: an image that cannot start is a build error, not a CrashLoopBackOff
    on a node."""
    if config.working_dir is not None:
        found = tree.resolve(config.working_dir)
        if found is None or found.kind != "dir":
            raise RootfsError(
                f"the working directory {config.working_dir} is not a directory of the image",
                field="working_dir",
            )
    argv = config.argv()
    if not argv:
        raise RootfsError("the image has neither an entrypoint nor a command", field="cmd")
    program = argv[0]
    if "/" in program:
        candidates = [program if program.startswith("/") else f"{config.working_dir}/{program}"]
    else:
        path = config.env.get("PATH", "")
        candidates = [f"{d}/{program}" for d in path.split(":") if d.startswith("/")]
    for candidate in candidates:
        found = tree.resolve(candidate)
        if found is not None and found.kind == "file" and found.mode & 0o111:
            return
    raise RootfsError(
        f"the image's command {program!r} is not an executable file in it "
        f"(looked at {', '.join(candidates) or 'no PATH'})",
        field="cmd",
    )


def _image_config(config: ImageConfig, layer: Layer) -> dict[str, Any]:
    return {
        "architecture": host_architecture(),
        "os": "linux",
        "config": config.to_oci(),
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
    }


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def _descriptor(media_type: str, blob: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": _digest(blob), "size": len(blob)}


def check_output(out: Path) -> None:
    """Whether an archive can go to `out` (its directory made if missing): a builder checks
    before the long part of its work, not after."""
    if out.is_dir():
        raise ImageOutputError(f"{out} is a directory; name the archive file", field="output")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImageOutputError(f"cannot write into {out.parent}: {exc}", field="output") from exc
    if not os.access(out.parent, os.W_OK):
        raise ImageOutputError(f"cannot write into {out.parent}", field="output")


def _work_dir(out: Path) -> Path:
    """A scratch directory beside `out` (same file system, so the final rename is atomic)."""
    check_output(out)
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise ImageOutputError(f"cannot write into {out.parent}: {exc}", field="output") from exc


def _write_layout(archive: Path, index: bytes, blobs: dict[str, bytes | Path]) -> None:
    def info(name: str, *, size: int = 0, directory: bool = False) -> tarfile.TarInfo:
        entry = tarfile.TarInfo(name)
        entry.mtime = EPOCH
        entry.uname = entry.gname = ""
        entry.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
        entry.mode = 0o755 if directory else 0o644
        entry.size = size
        return entry

    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info("blobs", directory=True))
        tar.addfile(info("blobs/sha256", directory=True))
        for digest in sorted(blobs):
            blob = blobs[digest]
            name = f"blobs/sha256/{digest}"
            if isinstance(blob, Path):
                with blob.open("rb") as content:
                    tar.addfile(info(name, size=blob.stat().st_size), content)
            else:
                tar.addfile(info(name, size=len(blob)), io.BytesIO(blob))
        tar.addfile(info("index.json", size=len(index)), io.BytesIO(index))
        layout = _json({"imageLayoutVersion": "1.0.0"})
        tar.addfile(info("oci-layout", size=len(layout)), io.BytesIO(layout))

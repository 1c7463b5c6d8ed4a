"""Reading an OCI archive back, checking every digest on the way: what the tests know of an
image is what a runtime would see after import, not what the builder meant to write."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Image:
    names: list[str]
    index: dict[str, Any]
    manifest: dict[str, Any]
    config: dict[str, Any]
    layers: list[bytes]  # each layer's uncompressed tar

    def members(self) -> dict[str, tarfile.TarInfo]:
        """Every path of the (single-layer) image, without a leading slash."""
        found: dict[str, tarfile.TarInfo] = {}
        for layer in self.layers:
            with tarfile.open(fileobj=io.BytesIO(layer), mode="r:") as tar:
                for info in tar.getmembers():
                    found[info.name] = info
        return found

    def read(self, path: str) -> bytes:
        for layer in self.layers:
            with tarfile.open(fileobj=io.BytesIO(layer), mode="r:") as tar:
                try:
                    extracted = tar.extractfile(path)
                except KeyError:
                    continue
                if extracted is not None:
                    return extracted.read()
        raise KeyError(path)

    def unpack(self, root: Path) -> None:
        for layer in self.layers:
            with tarfile.open(fileobj=io.BytesIO(layer), mode="r:") as tar:
                tar.extractall(root, numeric_owner=True, filter="fully_trusted")


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_archive(path: Path) -> Image:
    """The image in an OCI archive, its blobs checked against their names and descriptors."""
    with tarfile.open(path) as tar:
        files = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
        names = [m.name for m in tar.getmembers()]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert _sha256(data) == "sha256:" + name.rsplit("/", 1)[1], name

    def blob(descriptor: dict[str, Any]) -> bytes:
        data = files["blobs/sha256/" + descriptor["digest"].removeprefix("sha256:")]
        assert len(data) == descriptor["size"]
        return data

    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2
    (entry,) = index["manifests"]
    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    layers = []
    for descriptor in manifest["layers"]:
        assert descriptor["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        layers.append(gzip.decompress(blob(descriptor)))
    assert config["rootfs"] == {"type": "layers", "diff_ids": [_sha256(t) for t in layers]}
    return Image(names, index, manifest, config, layers)

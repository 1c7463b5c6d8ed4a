"""One image layer: a gzip'd tar of a `Tree`, written once, hashed on the way.

An image's identity is the digest of its manifest, which names each layer by the digest of its
compressed bytes, and its config names the uncompressed tar (the diff_id). Both hashes are taken
while the bytes stream to disk, so a layer of tens of megabytes is never held in memory or read
twice. Nothing of the build's moment or host leaks in: every mtime is `EPOCH`, no user or group
names, the gzip header carries no time or file name, and entries come sorted, so the same tree
gives the same two digests on every build."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from typing_extensions import Buffer

from firepool.image.entries import Entry, Tree

#: Every entry's mtime (and the gzip header's): the start of the Unix epoch.
EPOCH = 0
#: zlib's default trade: about as small as 9 here, in a third of the time.
COMPRESS_LEVEL = 6
MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class Layer:
    path: Path
    digest: str
    diff_id: str
    size: int


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `sink`."""

    def __init__(self, sink: BinaryIO | gzip.GzipFile) -> None:
        super().__init__()
        self.sink = sink
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        chunk = memoryview(data)
        self.sha256.update(chunk)
        self.size += chunk.nbytes
        self.sink.write(chunk)
        return chunk.nbytes

    def digest(self) -> str:
        return "sha256:" + self.sha256.hexdigest()


def _tarinfo(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path)
    info.mode = entry.mode
    info.uid, info.gid = entry.uid, entry.gid
    info.uname = info.gname = ""
    info.mtime = EPOCH
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type = tarfile.SYMTYPE
        assert entry.target is not None
        info.linkname = entry.target
    else:
        info.type = tarfile.REGTYPE
        info.size = entry.size()
    return info


def write_layer(tree: Tree, path: Path) -> Layer:
    """The layer of `tree` at `path` (created or replaced)."""
    with path.open("wb") as raw:
        compressed = _Hashing(raw)
        with gzip.GzipFile(
            filename="", mode="wb", fileobj=compressed, compresslevel=COMPRESS_LEVEL, mtime=EPOCH
        ) as zipped:
            plain = _Hashing(zipped)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for entry in tree.entries():
                    info = _tarinfo(entry)
                    if entry.kind != "file":
                        tar.addfile(info)
                    elif entry.data is not None:
                        tar.addfile(info, io.BytesIO(entry.data))
                    else:
                        assert entry.source is not None
                        with entry.source.open("rb") as content:
                            tar.addfile(info, content)
    return Layer(path, compressed.digest(), plain.digest(), compressed.size)

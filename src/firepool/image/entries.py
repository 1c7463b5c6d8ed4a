"""A layer's files, described before a byte is written.

The pool image is assembled from files scattered over the host (the interpreter, its shared
libraries, site-packages) plus a few made up on the spot (/etc/passwd), with owners the
builder may not be able to set on disk (it need not run as root). So the builder never stages
a root file system: it collects `Entry` values in a `Tree`, which the layer writer streams
straight into the tar, and ownership lives in the entry rather than in a directory's inode."""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from firepool.image.errors import RootfsError

EntryKind = Literal["dir", "file", "symlink"]
#: How many symlinks `Tree.resolve` follows before it calls the chain a loop (as the kernel).
MAX_SYMLINKS = 40


@dataclass(frozen=True)
class Entry:
    """One path of the image: its content comes from `source` (read when the layer is written)
    or `data`; a symlink's from `target`."""

    path: str
    kind: EntryKind
    mode: int
    uid: int = 0
    gid: int = 0
    source: Path | None = None
    data: bytes | None = None
    target: str | None = None

    def size(self) -> int:
        if self.kind != "file":
            return 0
        if self.data is not None:
            return len(self.data)
        assert self.source is not None
        return self.source.stat().st_size


def image_path(path: str) -> str:
    """The form every entry's path takes: relative to the image's root, no `.`/`..` parts, so
    that `/usr/lib` and `usr/lib/` name the same entry."""
    clean = posixpath.normpath("/" + path).lstrip("/")
    if not clean or clean == ".":
        raise RootfsError(f"{path!r} names the image's root, not a path in it", field="path")
    return clean


def host_mode(path: Path) -> int:
    """A host file's mode in the image: executable or not, nothing of the host's umask or
    owner bits, so that two hosts (or two checkouts) build the same layer."""
    return 0o755 if path.stat().st_mode & 0o111 else 0o644


class Tree:
    """The entries of one layer, by path. Parents are created on demand (root, 0755) and may be
    declared explicitly later (with other owners or modes); anything else added twice must be
    the same entry, so two pieces of the image that want one path differently fail loudly."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._implicit: set[str] = set()

    def __contains__(self, path: str) -> bool:
        return image_path(path) in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, path: str) -> Entry | None:
        return self._entries.get(image_path(path))

    def entries(self) -> list[Entry]:
        """Sorted by path: a parent sorts before its children, and the order never depends on
        the order the pieces were added in."""
        return [self._entries[p] for p in sorted(self._entries)]

    def dir(self, path: str, *, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        self.add(Entry(image_path(path), "dir", mode, uid, gid))

    def file(
        self,
        path: str,
        *,
        source: Path | None = None,
        data: bytes | None = None,
        mode: int | None = None,
        uid: int = 0,
        gid: int = 0,
    ) -> None:
        if (source is None) == (data is None):
            raise ValueError("a file takes exactly one of source and data")
        if mode is None:
            mode = host_mode(source) if source is not None else 0o644
        self.add(Entry(image_path(path), "file", mode, uid, gid, source=source, data=data))

    def symlink(self, path: str, target: str) -> None:
        self.add(Entry(image_path(path), "symlink", 0o777, target=target))

    def add(self, entry: Entry) -> None:
        self._parents(entry.path)
        old = self._entries.get(entry.path)
        redeclared = entry.path in self._implicit and old is not None and old.kind == "dir"
        if old is not None and old != entry and not (redeclared and entry.kind == "dir"):
            raise RootfsError(
                f"/{entry.path} is wanted twice, differently: {old} and {entry}", field="path"
            )
        self._implicit.discard(entry.path)
        self._entries[entry.path] = entry

    def _parents(self, path: str) -> None:
        parent = posixpath.dirname(path)
        missing: list[str] = []
        while parent:
            found = self._entries.get(parent)
            if found is not None:
                if found.kind != "dir":
                    raise RootfsError(
                        f"/{path} lies under /{parent}, which is a {found.kind}", field="path"
                    )
                break
            missing.append(parent)
            parent = posixpath.dirname(parent)
        for name in reversed(missing):
            self._entries[name] = Entry(name, "dir", 0o755)
            self._implicit.add(name)

    def copy_tree(
        self, source: Path, dest: str, *, skip: Callable[[Path], bool] = lambda _: False
    ) -> None:
        """Every file, directory and symlink under `source` at `dest`, host modes normalised
        (`host_mode`), owned by root; `skip` prunes a path and everything below it."""
        for path in _walk(source, skip):
            where = image_path(posixpath.join(dest, path.relative_to(source).as_posix()))
            if path.is_symlink():
                self.symlink(where, os.readlink(path))
            elif path.is_dir():
                self.dir(where)
            elif stat.S_ISREG(path.stat().st_mode):
                self.file(where, source=path)

    def resolve(self, path: str) -> Entry | None:
        """The entry `path` names inside the image once symlinks (at any depth, relative or
        absolute) are followed as the kernel would in a container; None if it names nothing."""
        parts = image_path(path).split("/")
        done: list[str] = []
        hops = 0
        while parts:
            name = parts.pop(0)
            if name == "..":
                if done:
                    done.pop()
                continue
            if name in ("", "."):
                continue
            current = "/".join([*done, name])
            entry = self._entries.get(current)
            if entry is None:
                return None
            if entry.kind == "symlink":
                hops += 1
                if hops > MAX_SYMLINKS:
                    return None
                assert entry.target is not None
                if entry.target.startswith("/"):
                    done = []
                parts = [p for p in entry.target.split("/") if p] + parts
                continue
            done.append(name)
        return self._entries.get("/".join(done)) if done else None


def _walk(root: Path, skip: Callable[[Path], bool]) -> Iterator[Path]:
    """Below `root`, sorted, without following symlinked directories."""
    for child in sorted(root.iterdir()):
        if skip(child):
            continue
        yield child
        if child.is_dir() and not child.is_symlink():
            yield from _walk(child, skip)


def from_directory(root: Path) -> Tree:
    """The tree of a root file system laid out on disk (the test cluster's `pause` image):
    everything owned by root, since a builder that is not root could not have set otherwise."""
    if not root.is_dir():
        raise RootfsError(f"{root} is not a directory", field="rootfs")
    tree = Tree()
    for path in _walk(root, lambda _: False):
        where = path.relative_to(root).as_posix()
        if path.is_symlink():
            tree.symlink(where, os.readlink(path))
        elif path.is_dir():
            tree.dir(where, mode=stat.S_IMODE(path.stat().st_mode))
        elif stat.S_ISREG(path.stat().st_mode):
            tree.file(where, source=path, mode=stat.S_IMODE(path.stat().st_mode))
        else:
            raise RootfsError(f"{path} is neither a file, a directory nor a symlink")
    return tree

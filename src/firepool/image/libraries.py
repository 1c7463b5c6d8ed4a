"""The shared libraries an interpreter and its extension modules load, found by `ldd`, and
where each goes in the image so that the dynamic loader finds it there.

The image has no /etc/ld.so.cache, so the loader finds libraries only in its built-in
directories (and RUNPATHs, which name host paths such as a pyenv prefix). Each library keeps
its host directory when that is one of those, and otherwise (a pyenv's libpython, a
/usr/local/lib) goes to /usr/lib. The image is laid out with a merged /usr, as Debian is:
/lib and /lib64 are symlinks into /usr, so a library ldd finds under /lib/... lands under
/usr/lib/... and both spellings resolve, the loader's own path (PT_INTERP) included."""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from firepool.image.errors import RootfsError

#: The merged-/usr links of the image (path in the image -> its target).
MERGED_USR = {"lib": "usr/lib", "lib64": "usr/lib64", "bin": "usr/bin", "sbin": "usr/sbin"}
#: `libfoo.so.1 => /path/libfoo.so.1 (0x...)`, or the loader: `/lib64/ld-linux... (0x...)`.
_RESOLVED = re.compile(r"^\s*(\S+)\s+=>\s+(\S+)\s+\(0x[0-9a-f]+\)\s*$")
_LOADER = re.compile(r"^\s*(/\S+)\s+\(0x[0-9a-f]+\)\s*$")
_MISSING = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")
#: The kernel's shared object in every process: no file to copy.
_VIRTUAL = re.compile(r"^\s*linux-(vdso|gate)\.so\.\d+\s+\(0x[0-9a-f]+\)\s*$")


@dataclass(frozen=True)
class Library:
    """`host` is the file ldd resolved (read through its symlinks), `image` where it goes."""

    host: Path
    image: str


def loader_dirs() -> frozenset[str]:
    """The directories the image's loader searches without a cache (merged-/usr spelling)."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = {"usr/lib", "usr/lib64"}
    if multiarch:
        dirs.add(f"usr/lib/{multiarch}")
    return frozenset(dirs)


def merged_usr(host: str) -> str:
    """The image path of host path `host`, spelled below /usr where the image's merged-/usr
    links lead (`/lib/x/y` is `usr/lib/x/y`)."""
    path = host.lstrip("/")
    top, _, rest = path.partition("/")
    return f"{MERGED_USR[top]}/{rest}" if top in MERGED_USR and rest else path


def in_image(host: str) -> str:
    """Where the library ldd named `host` goes in the image."""
    path = merged_usr(host)
    directory, _, name = path.rpartition("/")
    return path if directory in loader_dirs() else f"usr/lib/{name}"


def shared_libraries(objects: Iterable[Path]) -> list[Library]:
    """Every library (the loader included) that `objects` load, transitively: ldd reports the
    whole closure of each. Sorted by their place in the image; one file per place."""
    files = sorted({str(p) for p in objects})
    if not files:
        return []
    ldd = shutil.which("ldd")
    if ldd is None:
        raise RootfsError("ldd is not on the PATH: it finds the interpreter's libraries")
    run = subprocess.run([ldd, *files], capture_output=True, text=True, check=False, timeout=120)
    if run.returncode != 0:  # a file that is missing or not a dynamic object
        raise RootfsError(f"ldd failed ({run.returncode}): {run.stderr.strip()[-500:]}")
    found: dict[str, Library] = {}
    current = files[0]
    for line in run.stdout.splitlines():
        if not line.startswith(("\t", " ")) and line.endswith(":"):
            current = line[:-1]
            continue
        missing = _MISSING.match(line)
        if missing:
            raise RootfsError(f"{current} needs {missing[1]}, which ldd cannot find")
        resolved = _RESOLVED.match(line)
        loader = _LOADER.match(line)
        if resolved:
            host = resolved[2]
        elif loader:
            host = loader[1]
        elif _VIRTUAL.match(line) or "statically linked" in line:
            continue
        else:
            raise RootfsError(f"ldd {current}: cannot read its line {line.strip()!r}")
        library = Library(Path(host).resolve(), in_image(host))
        old = found.setdefault(library.image, library)
        if old.host != library.host:
            raise RootfsError(
                f"/{library.image} would be both {old.host} and {library.host}", field="path"
            )
    return [found[k] for k in sorted(found)]

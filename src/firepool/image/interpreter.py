"""The running Python interpreter, laid out as a prefix of its own in the image.

The binary goes to `<prefix>/bin/pythonX.Y` and its standard library to
`<prefix>/lib/pythonX.Y`: at start CPython looks for its library next to where it was started
from (`os.py` and `lib-dynload` one level up, under lib/), so the copy finds its own files
whatever prefix it was built for, and `site` adds `<prefix>/lib/pythonX.Y/site-packages`.
Left out: the test suites, IDLE, tkinter (it drags in X11), the bundled pip wheels (pip is
copied as a distribution), the static library and Makefile, and every `__pycache__` (the
image runs with PYTHONDONTWRITEBYTECODE; bytecode compiled here would differ between hosts)."""

from __future__ import annotations

import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from firepool.image.entries import Tree
from firepool.image.errors import RootfsError

VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
#: Top-level names of the standard library the image leaves out.
DROPPED_TOP = frozenset(
    {"site-packages", "dist-packages", "lib-dynload", "test", "idlelib", "tkinter",
     "turtledemo", "turtle.py", "ensurepip"}
)  # fmt: skip
#: Directory names dropped at any depth: test suites and bytecode.
DROPPED_ANYWHERE = frozenset({"__pycache__", "test", "tests", "idle_test"})
#: lib-dynload modules left out: the suites' helpers, and Tk.
DROPPED_EXTENSIONS = ("_test", "_ctypes_test", "_xxtestfuzz", "xxlimited", "_tkinter")


def executable() -> Path:
    """The interpreter's real binary: a venv's `bin/python` is a symlink to it."""
    return Path(sys.executable).resolve()


def stdlib_dir() -> Path:
    return Path(sysconfig.get_path("stdlib")).resolve()


def dynload_dir() -> Path:
    """lib-dynload, which is always on sys.path (a venv's sysconfig names the venv instead)."""
    for entry in sys.path:
        if entry and Path(entry).name == "lib-dynload" and Path(entry).is_dir():
            return Path(entry).resolve()
    raise RootfsError("this interpreter has no lib-dynload on sys.path")


def _dropped_source(root: Path, path: Path) -> bool:
    relative = path.relative_to(root)
    if len(relative.parts) == 1 and (
        relative.name in DROPPED_TOP or relative.name.startswith("config-")
    ):
        return True
    return path.name in DROPPED_ANYWHERE or path.suffix in (".pyc", ".pyo")


def add_interpreter(tree: Tree, prefix: str) -> list[Path]:
    """The interpreter under `prefix`, with `python3` and `python` links to it; the host's
    ELF objects it copied (for `ldd`)."""
    binary = executable()
    tree.file(f"{prefix}/bin/{VERSION}", source=binary, mode=0o755)
    tree.symlink(f"{prefix}/bin/python3", VERSION)
    tree.symlink(f"{prefix}/bin/python", VERSION)
    stdlib = stdlib_dir()
    if not (stdlib / "os.py").is_file():
        raise RootfsError(f"{stdlib} does not look like a standard library (no os.py)")
    tree.copy_tree(stdlib, f"{prefix}/lib/{VERSION}", skip=lambda p: _dropped_source(stdlib, p))
    objects = [binary]
    dynload = dynload_dir()
    for module in sorted(dynload.iterdir()):
        if not module.name.endswith(tuple(EXTENSION_SUFFIXES)):
            continue
        if module.name.startswith(DROPPED_EXTENSIONS):
            continue
        tree.file(f"{prefix}/{sys.platlibdir}/{VERSION}/lib-dynload/{module.name}", source=module)
        objects.append(module)
    return objects

"""Bytecode for every module of the image, compiled here at build time.

The Dockerfile's image gets it from pip, which compiles what it installs; without it the pod's
interpreter compiles the agent, pydantic and the standard library it imports at every start
(about a second of a fresh pod's start on these machines), and writes nothing back
(PYTHONDONTWRITEBYTECODE). Unchecked-hash .pyc files: the same source always gives the same
bytes (no timestamp), so the archive stays reproducible, and the interpreter does not stat the
source to validate them, which an immutable image does not need.
"""

from __future__ import annotations

import importlib.util
import posixpath
import py_compile
import tempfile
from pathlib import Path

from firepool.image.entries import Tree


def add_bytecode(tree: Tree, under: str) -> int:
    """A .pyc beside every .py file below `under` in `tree`; returns how many. A source that
    does not compile (test data of the standard library) is left without one, as compileall
    leaves it."""
    count = 0
    with tempfile.TemporaryDirectory(prefix="firepool-pyc-") as scratch:
        target = Path(scratch) / "out.pyc"
        for entry in tree.entries():
            if entry.kind != "file" or not entry.path.endswith(".py"):
                continue
            if not entry.path.startswith(under.strip("/") + "/"):
                continue
            source = entry.source
            if source is None:
                assert entry.data is not None
                source = Path(scratch) / "in.py"
                source.write_bytes(entry.data)
            try:
                py_compile.compile(
                    str(source),
                    cfile=str(target),
                    dfile="/" + entry.path,  # tracebacks name the image's path
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                )
            except (py_compile.PyCompileError, SyntaxError, ValueError):
                continue
            cached = importlib.util.cache_from_source(posixpath.join("/", entry.path))
            tree.file(cached, data=target.read_bytes(), mode=0o644)
            count += 1
    return count

"""Which argv can run in the warm interpreter, and how.

Only the shapes whose meaning is unambiguous are forked from the zygote: `python FILE ...`,
`python -m MODULE ...` and `python -c CODE ...` (optionally after `-u` or `-B`), where
`python` names this very interpreter version. Anything else (other flags, other programs,
another Python) is exec'd, so a job never runs under an interpreter it did not ask for.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Literal

_PY_NAMES = frozenset({"python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"})
_HARMLESS_FLAGS = frozenset({"-u", "-B"})


@dataclass(frozen=True, slots=True)
class PythonEntry:
    kind: Literal["file", "module", "code"]
    target: str
    args: tuple[str, ...]
    unbuffered: bool


def is_this_python(program: str) -> bool:
    if program == sys.executable:
        return True
    return "/" not in program and program in _PY_NAMES


def python_entry(argv: list[str]) -> PythonEntry | None:
    """The warm-startable form of `argv`, or None if it must be exec'd."""
    if not argv or not is_this_python(argv[0]):
        return None
    rest = argv[1:]
    unbuffered = False
    while rest and rest[0] in _HARMLESS_FLAGS:
        unbuffered = unbuffered or rest[0] == "-u"
        rest = rest[1:]
    if not rest:
        return None
    head = rest[0]
    if head in ("-m", "-c"):
        if len(rest) < 2:
            return None
        kind: Literal["module", "code"] = "module" if head == "-m" else "code"
        return PythonEntry(kind, rest[1], tuple(rest[2:]), unbuffered)
    if head.startswith("-"):
        return None
    return PythonEntry("file", head, tuple(rest[1:]), unbuffered)


def sys_argv_for(entry: PythonEntry, cwd: str) -> tuple[list[str], str]:
    """(sys.argv, sys.path[0]) as CPython would set them for this entry."""
    if entry.kind == "file":
        path = os.path.join(cwd, entry.target)
        return [entry.target, *entry.args], os.path.dirname(os.path.abspath(path))
    if entry.kind == "module":
        return [entry.target, *entry.args], cwd
    return ["-c", *entry.args], cwd

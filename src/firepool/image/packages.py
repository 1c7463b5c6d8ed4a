"""The agent's third-party distributions, copied from the running environment.

agent-requirements.txt names what the agent imports (a test keeps it so); their own
requirements are followed through each distribution's metadata, extras left out, so the image
gets pydantic's pydantic-core, typing-extensions and the rest, and nothing of the broker's.
Each distribution is copied file by file from its RECORD, dist-info included, as pip installed
it here: the image then holds the very code the agent was tested with on this host."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from firepool.image.entries import Tree
from firepool.image.errors import RootfsError

_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)(?:;(.*))?")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _parse(line: str, where: str) -> tuple[str, bool, str | None]:
    """A requirement's canonical name, whether it asks for extras, and its marker."""
    match = _REQUIREMENT.fullmatch(line)
    if match is None:
        raise RootfsError(f"{where}: cannot read the requirement {line!r}")
    marker = match[4].strip() if match[4] else None
    return canonical(match[1]), bool(match[2]), marker


def requirement_names(path: Path) -> list[str]:
    """The distributions a requirements file names (one a line, `#` comments)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise RootfsError(f"cannot read {path}: {exc}", field="requirements") from exc
    names: list[str] = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-"):
            raise RootfsError(f"{path}: options ({line!r}) are not followed", field="requirements")
        name, extras, marker = _parse(line, str(path))
        if extras or marker:
            raise RootfsError(
                f"{path}: {line!r}: extras and markers are not followed; name the "
                "distributions themselves",
                field="requirements",
            )
        names.append(name)
    return names


def _applies(marker: str | None) -> bool:
    """Whether a dependency's marker holds for this interpreter with no extra asked for. Only
    markers other than extras need `packaging` (none of the agent's dependencies has one)."""
    if marker is None:
        return True
    if re.search(r"\bextra\b", marker):
        return False
    try:
        from packaging.markers import Marker
    except ImportError as exc:
        raise RootfsError(f"the marker {marker!r} needs `packaging` to evaluate") from exc
    return Marker(marker).evaluate()


def closure(names: Iterable[str]) -> list[metadata.Distribution]:
    """`names` and everything they require, sorted by canonical name."""
    found: dict[str, metadata.Distribution] = {}
    todo = [canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise RootfsError(
                f"{name} is not installed here, and the image copies it from this environment "
                "(pip install -r deploy/docker/agent-requirements.txt)",
                field="requirements",
            ) from None
        found[name] = dist
        for requirement in dist.requires or ():
            dependency, _, marker = _parse(requirement, f"{name}'s metadata")
            if _applies(marker):
                todo.append(dependency)
    return [found[k] for k in sorted(found)]


def add_distribution(tree: Tree, dist: metadata.Distribution, site: str) -> list[Path]:
    """`dist`'s files under `site` (no bytecode, no scripts outside site-packages); its
    extension modules (for `ldd`)."""
    files = dist.files
    name = dist.metadata["Name"]
    if files is None:
        raise RootfsError(f"{name} has no RECORD: the builder cannot tell its files")
    objects: list[Path] = []
    for file in sorted(files, key=str):
        if file.parts[0] == ".." or "__pycache__" in file.parts or file.suffix == ".pyc":
            continue
        source = Path(str(file.locate())).resolve()
        if not source.is_file():
            raise RootfsError(f"{name}'s RECORD names {file}, which is not on disk")
        tree.file(f"{site}/{file.as_posix()}", source=source)
        if source.name.endswith(tuple(EXTENSION_SUFFIXES)):
            objects.append(source)
    return objects

"""The README and docs/ point only at things that exist.

Docs rot silently: a page is renamed, a section retitled, a rule moves to another module, and
the links that sent a reader there keep pointing at nothing. Every relative link in README.md
and docs/*.md must name an existing file or folder; a link to a heading of a Markdown page
must match one of that page's headings (GitHub's anchor for it); and a link whose text names
a function in a Python file (`control.tracker.reuse_label` -> control/tracker.py) must find
that function, or class and method, defined there (docs/architecture.md names each rule's
function this way).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "firepool"

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
_DOTTED = re.compile(r"^`([A-Za-z_][\w.]*)`$")


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _prose(text: str) -> str:
    """The page without its fenced code blocks (a link-like string in code is no link)."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link syntax reduced to its text, lower case, punctuation
    dropped (word characters, spaces and hyphens stay), spaces to hyphens."""
    text = _LINK.sub(lambda m: m.group(1), heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor; a repeated heading's anchors get GitHub's -1, -2 suffixes."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in _HEADING.findall(_prose(page.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[tuple[str, str]]:
    """(text, target) of every link and image in the page's prose."""
    return _LINK.findall(_prose(page.read_text(encoding="utf-8")))


def _defined(path: Path, names: list[str]) -> bool:
    """Whether `names` (a function, a class, or a class and one of its methods) is defined at
    the top of the module in `path`."""
    body: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for name in names:
        found = [
            node
            for node in body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.name == name
        ]
        if not found:
            return False
        node = found[0]
        body = node.body if isinstance(node, ast.ClassDef) else []
    return True


def _symbol(text: str, target: Path) -> list[str] | None:
    """The names after the module in a link text like `control.tracker.Tracker.claim` that
    points at control/tracker.py; None when the text names no symbol of that module."""
    match = _DOTTED.match(text)
    if match is None or target.suffix != ".py":
        return None
    try:
        module = target.relative_to(PACKAGE).with_suffix("")
    except ValueError:
        return None
    prefix = ".".join(module.parts)
    dotted = match.group(1).removeprefix("firepool.")
    if dotted.endswith(".py") or not dotted.startswith(prefix + "."):  # a file's name
        return None
    return dotted[len(prefix) + 1 :].split(".")


def problems(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the page's relative links, one line each (empty: nothing)."""
    out: list[str] = []
    for text, target in links(page):
        if _SCHEME.match(target):
            continue  # http(s), mailto: not this test's business
        path_part, _, fragment = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(root)}: ({target})"
        if not path.exists():
            out.append(f"{where}: no such file")
            continue
        if fragment and path.suffix == ".md" and fragment not in anchors(path):
            out.append(f"{where}: no heading with anchor #{fragment} in {path.name}")
        names = _symbol(text, path)
        if names is not None and not _defined(path, names):
            out.append(f"{where}: {'.'.join(names)} is not defined in {path.name}")
    return out


def test_every_relative_link_resolves() -> None:
    found = [problem for page in pages() for problem in problems(page)]
    assert found == []


def test_the_pages_do_link() -> None:
    # Guards the check above against a pattern that matches nothing: the README links to the
    # docs, and the architecture page names each rule's function.
    readme = {target for _, target in links(ROOT / "README.md")}
    assert {"docs/architecture.md", "docs/performance.md", "docs/usage.md"} <= readme
    named = [
        text
        for text, target in links(ROOT / "docs" / "architecture.md")
        if _symbol(text, (ROOT / "docs" / target.partition("#")[0]).resolve())
    ]
    assert "`control.recovery.plan_recovery`" in named
    assert len(named) >= 9


def test_a_broken_link_anchor_or_symbol_is_reported(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "README.md").write_text(
        "# Top\n\n## Current figures (`bench x`)\n\n"
        "[ok](docs/a.md#a-section) [gone](docs/missing.md) [bad anchor](docs/a.md#nowhere)\n"
        "[self](#current-figures-bench-x) [web](https://example.org/x)\n"
        "```\n[in code](docs/not-checked.md)\n```\n",
        encoding="utf-8",
    )
    (docs / "a.md").write_text("# A\n\n## A section\n\n## A section\n", encoding="utf-8")
    found = problems(tmp_path / "README.md", tmp_path)
    assert found == [
        "README.md: (docs/missing.md): no such file",
        "README.md: (docs/a.md#nowhere): no heading with anchor #nowhere in a.md",
    ]
    assert anchors(docs / "a.md") == {"a", "a-section", "a-section-1"}


def test_a_function_that_moved_is_reported() -> None:
    tracker = PACKAGE / "control" / "tracker.py"
    assert _symbol("`control.tracker.Tracker.claim`", tracker) == ["Tracker", "claim"]
    assert _defined(tracker, ["Tracker", "claim"])
    assert _defined(tracker, ["reuse_label"])
    assert not _defined(tracker, ["Tracker", "no_such_method"])
    assert not _defined(tracker, ["plan_recovery"])
    assert _symbol("`service/broker.py`", tracker) is None
    assert _symbol("`composition.py`", PACKAGE / "composition.py") is None

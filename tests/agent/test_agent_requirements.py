"""The pool image installs what the agent imports: deploy/docker/agent-requirements.txt holds
every third-party distribution that `firepool.agent` needs at module level (followed through
the firepool modules it imports), nothing more, with pyproject.toml's specifiers, and the
Dockerfile installs exactly that file. The image once shipped without httptools and its agent
could not start; these tests fail on that image."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
REQUIREMENTS = ROOT / "deploy/docker/agent-requirements.txt"
DOCKERFILE = ROOT / "deploy/docker/pool-base.Dockerfile"
#: Imported inside a function only, by a pool that starts a Ray node; Ray pools' images add it.
LAZY_ALLOWED = {"ray"}


@dataclass
class Closure:
    modules: set[str] = field(default_factory=set)
    #: top-level third-party module -> the firepool modules that import it
    eager: dict[str, set[str]] = field(default_factory=dict)
    lazy: dict[str, set[str]] = field(default_factory=dict)


def module_file(name: str) -> Path | None:
    path = SRC.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def imported_names(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*parts, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return []


def eager_nodes(tree: ast.Module) -> tuple[list[ast.AST], list[ast.AST]]:
    """Imports run when the module loads, and those inside functions (run on a call only).
    `if TYPE_CHECKING:` blocks run neither way and are left out."""
    eager: list[ast.AST] = []
    lazy: list[ast.AST] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit_body(child.orelse, in_function)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                (lazy if in_function else eager).append(child)
            funcs = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            visit(child, in_function or isinstance(child, funcs))

    def visit_body(body: list[ast.stmt], in_function: bool) -> None:
        holder = ast.Module(body=body, type_ignores=[])
        visit(holder, in_function)

    visit(tree, False)
    return eager, lazy


def agent_closure() -> Closure:
    """The firepool modules the agent loads, and the third-party modules they import: eagerly
    (at load) or lazily (inside a function, or in a firepool module reached only that way)."""
    closure = Closure()
    agent = [f"firepool.agent.{p.stem}" for p in (SRC / "firepool/agent").glob("*.py")]
    todo = [(name, False) for name in ["firepool", "firepool.agent", *agent]]
    reached_lazily: set[str] = set()
    while todo:
        name, lazily = todo.pop()
        if (path := module_file(name)) is None:
            continue
        if name in closure.modules or (lazily and name in reached_lazily):
            continue
        (reached_lazily if lazily else closure.modules).add(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        eager, lazy = eager_nodes(ast.parse(path.read_text()))
        for nodes, on_call in ((eager, lazily), (lazy, True)):
            for node in nodes:
                for imported in imported_names(node, package):
                    top, parts = imported.split(".")[0], imported.split(".")
                    if top == "firepool":
                        todo += [(".".join(parts[:i]), on_call) for i in range(1, len(parts) + 1)]
                    elif top and top not in sys.stdlib_module_names:
                        found = closure.lazy if on_call else closure.eager
                        found.setdefault(top, set()).add(name)
    return closure


def requirements() -> list[Requirement]:
    lines = (line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def distributions_of(top_level: str) -> set[str]:
    return {canonicalize_name(d) for d in metadata.packages_distributions().get(top_level, [])}


def with_dependencies(names: set[str]) -> set[str]:
    """The distributions a pip install of `names` brings (base requirements, no extras)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for raw in metadata.requires(name) or []:
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def test_every_module_level_import_of_the_agent_is_installed_by_the_list() -> None:
    closure = agent_closure()
    assert "firepool.agent.request_head" in closure.modules  # the walk reaches the agent
    installed = with_dependencies({r.name for r in requirements()})
    missing = {
        top: sorted(users)
        for top, users in closure.eager.items()
        if not distributions_of(top) & installed
    }
    assert not missing, f"imported by the agent but not in {REQUIREMENTS.name}: {missing}"


def test_the_list_holds_nothing_the_agent_does_not_import() -> None:
    imported = {d for top in agent_closure().eager for d in distributions_of(top)}
    extra = {r.name for r in requirements()} - imported
    assert not extra, f"{REQUIREMENTS.name} installs what the agent never imports: {extra}"


def test_imports_made_on_a_call_only_are_the_known_ones() -> None:
    lazy = set(agent_closure().lazy) - set(agent_closure().eager)
    assert lazy <= LAZY_ALLOWED, f"new function-level third-party imports: {lazy}"


def test_the_specifiers_are_pyprojects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dependencies = map(Requirement, project["dependencies"])
    pinned = {canonicalize_name(r.name): r.specifier for r in dependencies}
    for requirement in requirements():
        assert requirement.specifier == pinned[canonicalize_name(requirement.name)], requirement


def test_the_pool_image_installs_exactly_the_list() -> None:
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.startswith("#")]
    text = "\n".join(lines).replace("\\\n", " ")
    assert re.search(r"^COPY deploy/docker/agent-requirements\.txt \./$", text, re.M)
    installs = re.findall(r"pip install (.*?)(?:&&|$)", text, re.M)
    args = [" ".join(a for a in i.split() if a != "--no-cache-dir") for i in installs]
    assert args == ["--upgrade pip", "-r agent-requirements.txt", "--no-deps ."]


def test_the_agent_imports_with_only_the_listed_distributions() -> None:
    """Every agent module, imported in a fresh interpreter that refuses any top-level module
    some other installed distribution provides: absent, as in the image (an optional import
    guarded by `except ImportError` takes its fallback)."""
    allowed_dists = with_dependencies({r.name for r in requirements()})
    refused = {
        top
        for top, dists in metadata.packages_distributions().items()
        if not {canonicalize_name(d) for d in dists} & allowed_dists and top != "firepool"
    }
    modules = sorted(m for m in agent_closure().modules if m.startswith("firepool.agent"))
    script = textwrap.dedent(
        """
        import importlib, importlib.abc, sys
        refused, modules = set(sys.argv[1].split(",")), sys.argv[2].split(",")
        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in refused:
                    raise ModuleNotFoundError(f"not in the pool image: {name}", name=name)
                return None
        sys.meta_path.insert(0, Refuse())
        for name in modules:
            importlib.import_module(name)
        print("imported", len(modules))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, ",".join(sorted(refused)), ",".join(modules)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"imported {len(modules)}"

"""The tests tree mirrors the source tree, and tests build their objects through factories.

`tests/<pkg>/test_<module>.py` (or `test_<module>_<aspect>.py`) tests
`src/firepool/<pkg>/<module>.py` or the package `src/firepool/<pkg>/<module>/`; a file at the
top of tests/ tests a module of `src/firepool` itself. What no one module owns (end to end,
hostile suites, checks of the repository's own files) is named in the allow-lists below, each
with its reason. Pools are built with `firepool.testing.control.cpu_pool` / `gpu_pool`; only the
tests of `PoolSpec`'s own validation construct it by hand.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Test files no single module owns: path under tests/ -> why.
CROSS_CUTTING = {
    "test_docs_links.py": "the README and docs/ point only at things that exist",
    "test_import_cycles.py": "the import graph of the whole of src/firepool",
    "test_layout.py": "this file: the layout of tests/ itself",
    "test_rules_in_core.py": "no paper rule in any module of service/ or sim/",
    "agent/test_agent_requirements.py": "deploy/docker/agent-requirements.txt against the agent",
    "agent/test_hostile_jobs.py": "hostile jobs against real pods (agent, backend and reset)",
    "agent/test_hostile_network.py": "hostile jobs against the network of real pods",
    "backends/kubernetes/test_k8s_deploy.py": "the manifests under deploy/",
    "store/test_server_fixtures.py": "the database fixtures of firepool.testing themselves",
}

#: Test directories that mirror no package of src/firepool: path under tests/ -> why.
CROSS_CUTTING_DIRS = {
    "k8s": "end to end against a real Kubernetes control plane (make test-k8s)",
    "examples": "the scripts under examples/ (the repository's, not a package's)",
}

#: The only test files that may call `PoolSpec(...)` themselves: tests of its validation.
POOLSPEC_BY_HAND = {
    "test_model.py": "PoolSpec's own tests: fields, typed errors",
    "control/test_gang_network.py": "a bad `network` value is a typed error",
    "control/test_images.py": "a bad `allowed_images` entry is a ConfigError naming it",
}


def owns(src_dir: Path, stem: str) -> bool:
    """Whether some leading words of `stem` (test_ removed) name a module or package there."""
    words = stem.removeprefix("test_").split("_")
    for i in range(1, len(words) + 1):
        name = "_".join(words[:i])
        if (src_dir / f"{name}.py").is_file() or (src_dir / name / "__init__.py").is_file():
            return True
    return False


def misnamed(root: Path, allowed: dict[str, str], allowed_dirs: dict[str, str]) -> list[str]:
    """Test files under root/tests whose name matches no module of root/src/firepool."""
    tests, src = root / "tests", root / "src" / "firepool"
    bad = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if rel.as_posix() in allowed or rel.parts[0] in allowed_dirs:
            continue
        src_dir = src.joinpath(*rel.parts[:-1])
        where = "/".join(("src/firepool", *rel.parts[:-1]))
        if not src_dir.is_dir():
            bad.append(f"{rel.as_posix()}: no package {where}")
        elif not owns(src_dir, path.stem):
            bad.append(f"{rel.as_posix()}: no module in {where}")
    return bad


def stale(root: Path, allowed: dict[str, str], allowed_dirs: dict[str, str]) -> list[str]:
    """Allow-list entries that name nothing any more."""
    tests = root / "tests"
    return [p for p in [*allowed, *allowed_dirs] if not (tests / p).exists()]


def hand_built_pools(root: Path, allowed: dict[str, str]) -> list[str]:
    """`PoolSpec(...)` calls in test code outside the allow-list, as path:line."""
    tests = root / "tests"
    found = []
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests).as_posix()
        if rel in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "PoolSpec":
                found.append(f"{rel}:{node.lineno}")
    return found


def test_every_test_file_is_named_after_a_module() -> None:
    bad = misnamed(REPO, CROSS_CUTTING, CROSS_CUTTING_DIRS)
    assert not bad, "name each test after its module (test_<module>[_<aspect>].py):\n" + "\n".join(
        bad
    )
    assert not stale(REPO, CROSS_CUTTING, CROSS_CUTTING_DIRS)


def test_pools_come_from_the_factories() -> None:
    found = hand_built_pools(REPO, POOLSPEC_BY_HAND)
    assert not found, "use firepool.testing.control.cpu_pool/gpu_pool:\n" + "\n".join(found)
    assert not stale(REPO, POOLSPEC_BY_HAND, {})


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_layout_check_flags_a_misnamed_file(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "src/firepool/model.py": "",
            "src/firepool/control/__init__.py": "",
            "src/firepool/control/core.py": "",
            "src/firepool/control/pool_edits.py": "",
            "src/firepool/scheduling/policies/__init__.py": "",
            "src/firepool/scheduling/policies/oak.py": "",
            "tests/test_model.py": "",
            "tests/test_docs.py": "",
            "tests/control/test_core.py": "",
            "tests/control/test_core_cancel.py": "",
            "tests/control/test_pool_edits.py": "",
            "tests/control/test_tracker.py": "",  # no control/tracker.py in this tree
            "tests/control/test_sdk_core.py": "",  # a prefix before the module's name
            "tests/control/helpers.py": "",  # not a test file
            "tests/scheduling/test_policies_oak.py": "",  # a package, then the aspect
            "tests/scheduling/policies/test_oak.py": "",
            "tests/scheduling/policies/test_sia.py": "",
            "tests/nowhere/test_thing.py": "",
            "tests/k8s/test_k8s_cluster.py": "",
        },
    )
    allowed = {"test_docs.py": "why"}
    dirs = {"k8s": "why"}
    assert misnamed(root, allowed, dirs) == [
        "control/test_sdk_core.py: no module in src/firepool/control",
        "control/test_tracker.py: no module in src/firepool/control",
        "nowhere/test_thing.py: no package src/firepool/nowhere",
        "scheduling/policies/test_sia.py: no module in src/firepool/scheduling/policies",
    ]
    assert misnamed(root, {}, {}) == [
        "control/test_sdk_core.py: no module in src/firepool/control",
        "control/test_tracker.py: no module in src/firepool/control",
        "k8s/test_k8s_cluster.py: no package src/firepool/k8s",
        "nowhere/test_thing.py: no package src/firepool/nowhere",
        "scheduling/policies/test_sia.py: no module in src/firepool/scheduling/policies",
        "test_docs.py: no module in src/firepool",
    ]
    assert stale(root, {**allowed, "test_gone.py": "why"}, dirs) == ["test_gone.py"]


def test_the_factory_check_flags_a_hand_built_pool(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "tests/control/test_a.py": "from firepool.testing.control import cpu_pool\n"
            "POOL = cpu_pool(max_count=2)\n",
            "tests/control/test_b.py": "from firepool.model import PoolSpec\n\n"
            "POOL = PoolSpec(name='cpu')\n",
            "tests/api/harness.py": "import firepool.model as m\nPOOLS = [m.PoolSpec(name='x')]\n",
            "tests/test_model.py": "PoolSpec(name='p', step=-1)\n",
        },
    )
    assert hand_built_pools(root, {"test_model.py": "validation"}) == [
        "api/harness.py:2",
        "control/test_b.py:3",
    ]

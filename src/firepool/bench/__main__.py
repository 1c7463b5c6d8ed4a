"""`python -m firepool.bench NAME [options]`: run one benchmark.

Each benchmark is a module `firepool.bench.<name>` (dashes become underscores) with a
`main(argv) -> int`; adding a module adds a benchmark, with no registry to keep in step.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import firepool.bench as package

_NOT_BENCHMARKS = {"common", "__main__"}


def available() -> list[str]:
    return sorted(
        m.name.replace("_", "-")
        for m in pkgutil.iter_modules(package.__path__)
        if m.name not in _NOT_BENCHMARKS
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(
            "usage: python -m firepool.bench NAME [options]\nbenchmarks: " + ", ".join(available())
        )
        return 0 if argv else 2
    name = argv[0]
    if name not in available():
        print(
            f"unknown benchmark {name!r}; choose one of: {', '.join(available())}", file=sys.stderr
        )
        return 2
    module = importlib.import_module(f"firepool.bench.{name.replace('-', '_')}")
    result: int = module.main(argv[1:])
    return result


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Alternated side-by-side runs of one `python -m firepool.bench` benchmark on two source trees.

A shared 2-core machine drifts by more than the 10% a change is allowed, so the two trees run
in turn (A, B, A, B, ...) under the same load, and the comparison is of medians with each
side's range printed. Usage:

    python tools/bench_ab.py --a ../base/src --b src --rounds 5 \
        --metric events_per_s -- sim --quick --seconds 5

`--metric` names a number in the benchmark's JSON by a dotted path (list items by index);
give it several times to compare several numbers of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def pick(data: Any, path: str) -> float:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return float(data)


def run_once(src: Path, bench: list[str], metrics: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        env = {**os.environ, "PYTHONPATH": str(src.resolve())}
        subprocess.run(
            [sys.executable, "-m", "firepool.bench", *bench, "--json", str(out)],
            env=env, check=True, stdout=subprocess.DEVNULL,
        )
        data = json.loads(out.read_text())
    return {m: pick(data, m) for m in metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="source tree A (the baseline)")
    parser.add_argument("--b", type=Path, required=True, help="source tree B (the change)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--metric", action="append", required=True)
    parser.add_argument("--json", type=Path, help="where to write every run's numbers")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- NAME [options]")
    args = parser.parse_args()
    bench = [a for a in args.bench if a != "--"]
    runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for i in range(args.rounds):
        for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
            runs[side].append(run_once(getattr(args, side), bench, args.metric))
            print(f"round {i + 1} {side}: {runs[side][-1]}", flush=True)
    print(f"\n{'metric':40} {'A median':>12} {'B median':>12} {'B/A':>7}  A range / B range")
    summary = {}
    for m in args.metric:
        a = [r[m] for r in runs["a"]]
        b = [r[m] for r in runs["b"]]
        ma, mb = statistics.median(a), statistics.median(b)
        ratio = mb / ma if ma else float("nan")
        summary[m] = {"a": a, "b": b, "a_median": ma, "b_median": mb, "ratio": ratio}
        print(f"{m:40} {ma:12.4g} {mb:12.4g} {ratio:7.3f}  "
              f"{min(a):.4g}-{max(a):.4g} / {min(b):.4g}-{max(b):.4g}")
    if args.json:
        args.json.write_text(json.dumps({"bench": bench, "metrics": summary}, indent=2))


if __name__ == "__main__":
    main()

"""Mutation score per file from mutmut's results (`make mutation` runs it after mutmut).

Reads mutants/**/*.py.meta; a mutant whose tests failed (or timed out) is killed, exit 0 is a
survivor, 5/33 means no test reached it. Mutants listed in tests/mutation-equivalent.txt
(name, then why) are equivalent: no test can tell them from the original. Prints one line per
file and every survivor that is not known to be equivalent; exits 1 if any file is under the
target (90%) once equivalents are set aside.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TARGET = 0.90


def main() -> int:
    root = Path("mutants")
    equivalent = {
        line.split()[0]
        for line in Path("tests/mutation-equivalent.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    status = 0
    for meta in sorted(root.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if not codes:
            continue
        checked = {k: v for k, v in codes.items() if v is not None}
        survived = sorted(k for k, v in checked.items() if v in (0, 5, 33))
        unknown = [k for k in survived if k not in equivalent]
        killed = len(checked) - len(survived)
        relevant = len(checked) - (len(survived) - len(unknown))
        score = killed / relevant if relevant else 1.0
        name = str(meta.relative_to(root)).removesuffix(".meta")
        print(
            f"{name}: {killed}/{len(checked)} killed, {len(survived) - len(unknown)} equivalent,"
            f" {len(unknown)} surviving, {len(codes) - len(checked)} not run"
            f" -> {score:.1%} of the non-equivalent mutants"
        )
        for key in unknown:
            print(f"    survived: {key}")
        if checked and score < TARGET:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())

"""A tiny elastic job for tests: no framework, only the broker's contract.

    python -m firepool.testing.elastic_job STEPS [STEP_S]

Every rank counts steps of STEP_S seconds (default 0.05) from the step in the checkpoint;
rank 0 saves the step after each one (atomically) and reports progress about every 0.2 s.
SIGTERM makes every rank exit 0 right after its current step (rank 0 saved it), which is a
graceful, checkpointed stop. Each rank appends `<attempt> <world> <rank> <start-step>` to
`attempts.log` in the checkpoint directory, so a test can see every attempt's world size.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from firepool.client.progress import report_progress
from firepool.protocol import JobEnv

_stop = False


def _on_term(_signum: int, _frame: object) -> None:
    global _stop
    _stop = True


def _load(path: Path) -> int:
    try:
        return int(json.loads(path.read_text())["step"])
    except (OSError, ValueError, KeyError):
        return 0


def _save(path: Path, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    total = int(argv[0])
    step_s = float(argv[1]) if len(argv) > 1 else 0.05
    signal.signal(signal.SIGTERM, _on_term)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    directory = Path(os.environ.get(JobEnv.CHECKPOINT_DIR, "."))
    state = directory / "state.json"
    step = _load(state)
    with (directory / "attempts.log").open("a") as log:
        log.write(f"{os.environ.get(JobEnv.ATTEMPT, '-')} {world} {rank} {step}\n")
    last_report = 0.0
    while step < total and not _stop:
        time.sleep(step_s)
        step += 1
        if rank == 0:
            _save(state, step)
            now = time.monotonic()
            if now - last_report >= 0.2 or step == 1:
                last_report = now
                report_progress(step=step, samples_per_s=world / step_s, fraction=step / total)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

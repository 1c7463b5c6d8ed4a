"""examples/elastic-cifar/train.py as the broker runs it: real rank processes over gloo on
127.0.0.1, stopped with SIGTERM, killed with SIGKILL, resumed at other world sizes.

Every run uses the same small job (40 steps of 20 samples, cut into 7 micro-batches of at most 3,
so that neither 20 samples nor 7 micro-batches divide evenly among 2 or 3 ranks). The script
reduces gradients in a way that does not depend on the world size, so a job stopped at W=2 and
finished at W=3 must end with exactly the parameters of one uninterrupted single-process run:
the checks below compare bit for bit (`torch.equal`), not with a tolerance.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.timeout(180)

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "elastic-cifar" / "train.py"
STEPS = 40
JOB_ARGS = [
    "--steps", str(STEPS),
    "--global-batch", "20",
    "--micro-batch", "3",
    "--checkpoint-every", "5",
    "--seed", "7",
    "--log-every", "1000",
]  # fmt: skip
SLOW = ["--step-sleep-s", "0.1"]  # leaves room to interrupt mid-run


@dataclass
class Rank:
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(world: int, ckpt: Path, logs: Path, extra: list[str] | None = None) -> list[Rank]:
    """One attempt: `world` rank processes (no WORLD_SIZE at all for a single process)."""
    logs.mkdir(parents=True, exist_ok=True)
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FIREPOOL_")  # not under a broker: report_progress is a no-op
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    base["FIREPOOL_CHECKPOINT_DIR"] = str(ckpt)
    port = _free_port()
    ranks = []
    for rank in range(world):
        env = dict(base)
        if world > 1:
            env.update(
                RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_RANK="0",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
            )
        log = logs / f"attempt-w{world}-rank{rank}-{time.monotonic_ns()}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), *JOB_ARGS, *(extra or [])],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        ranks.append(Rank(proc, log))
    return ranks


def _wait(ranks: list[Rank], timeout: float = 90) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    try:
        for r in ranks:
            codes.append(r.proc.wait(timeout=max(deadline - time.monotonic(), 0.1)))
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
    return codes


def _checkpoint(ckpt: Path) -> dict | None:
    path = ckpt / "checkpoint.pt"
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def _wait_for_checkpoint(ckpt: Path, ranks: list[Rank], min_step: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = _checkpoint(ckpt)
        if state is not None and state["step"] >= min_step:
            return
        for r in ranks:
            assert r.proc.poll() is None, f"rank exited early:\n{r.output()}"
        time.sleep(0.05)
    _wait(ranks, timeout=0)
    pytest.fail(f"no checkpoint at step >= {min_step} in time:\n{ranks[0].output()}")


def _result(rank0: Rank) -> dict:
    last = rank0.output().strip().splitlines()[-1]
    assert last.startswith("RESULT "), rank0.output()
    return json.loads(last.removeprefix("RESULT "))


def _assert_same_model(state: dict, reference: dict) -> None:
    for name, want in reference["model"].items():
        got = state["model"][name]
        diff = float((got - want).abs().max())
        assert torch.equal(got, want), f"{name} differs from the uninterrupted run by {diff:.3e}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The uninterrupted single-process run (no WORLD_SIZE, no process group)."""
    root = tmp_path_factory.mktemp("reference")
    ranks = _launch(1, root / "ckpt", root / "logs")
    assert _wait(ranks) == [0], ranks[0].output()
    result = _result(ranks[0])
    assert result["steps"] == STEPS
    assert result["world_sizes"] == [1]
    state = _checkpoint(root / "ckpt")
    assert state is not None and state["step"] == STEPS
    return {"result": result, "model": state["model"]}


def test_sigterm_at_w2_then_resume_at_w3_is_exact(tmp_path: Path, reference: dict) -> None:
    ckpt, logs = tmp_path / "ckpt", tmp_path / "logs"

    first = _launch(2, ckpt, logs, SLOW)
    _wait_for_checkpoint(ckpt, first, min_step=5)
    for r in first:
        r.proc.send_signal(signal.SIGTERM)
    assert _wait(first, timeout=60) == [0, 0], [r.output() for r in first]
    assert "stop requested" in first[0].output()
    stopped = _checkpoint(ckpt)
    assert stopped is not None
    assert 0 < stopped["step"] < STEPS
    assert stopped["samples_seen"] == stopped["step"] * 20
    assert stopped["history"][-1]["world_size"] == 2

    second = _launch(3, ckpt, logs)
    assert _wait(second) == [0, 0, 0], [r.output() for r in second]
    for rank, r in enumerate(second):
        assert f"rank={rank} world_size=3 resumed_step={stopped['step']}" in r.output()
    result = _result(second[0])
    assert result["steps"] == result["total_steps"] == STEPS
    assert result["attempts"] == 2
    assert result["world_sizes"] == [2, 3]
    assert result["final_train_loss"] == reference["result"]["final_train_loss"]
    assert result["test_accuracy"] == reference["result"]["test_accuracy"]
    final = _checkpoint(ckpt)
    assert final is not None and final["step"] == STEPS
    _assert_same_model(final, reference)

    # A relaunch of the finished job does no work: it prints the result and exits 0.
    again = _launch(1, ckpt, logs)
    assert _wait(again) == [0], again[0].output()
    assert _result(again[0]) == result
    assert "step " not in again[0].output()


def test_sigkill_of_one_rank_resumes_from_last_periodic_checkpoint(
    tmp_path: Path, reference: dict
) -> None:
    ckpt, logs = tmp_path / "ckpt", tmp_path / "logs"

    first = _launch(2, ckpt, logs, SLOW)
    _wait_for_checkpoint(ckpt, first, min_step=10)
    first[1].proc.kill()  # the injected failure; its peer must not hang in the all-reduce
    codes = _wait(first, timeout=60)
    assert codes[1] == -signal.SIGKILL
    assert codes[0] != 0, first[0].output()
    killed = _checkpoint(ckpt)
    assert killed is not None
    assert killed["step"] % 5 == 0 and 10 <= killed["step"] < STEPS  # a periodic checkpoint

    second = _launch(1, ckpt, logs)
    assert _wait(second) == [0], second[0].output()
    assert f"world_size=1 resumed_step={killed['step']}" in second[0].output()
    result = _result(second[0])
    assert result["steps"] == STEPS
    assert result["world_sizes"] == [2, 1]
    final = _checkpoint(ckpt)
    assert final is not None
    _assert_same_model(final, reference)

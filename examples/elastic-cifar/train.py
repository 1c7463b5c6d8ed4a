"""Elastic data-parallel training on synthetic CIFAR-shaped data (PyTorch, CPU, gloo).

The broker launches this script once per attempt on W pods (one process, one rank each), with
rank and rendezvous in the environment as torchrun sets them (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, LOCAL_RANK). It may stop an attempt with SIGTERM and relaunch the job at another
world size, or kill it with SIGKILL. The job keeps its state in FIREPOOL_CHECKPOINT_DIR, which
outlives attempts, and resumes from it at any world size:

* the global batch is fixed and the samples of step s depend on (seed, s) alone; the batch is
  cut into fixed micro-batches (--micro-batch) and rank r trains on a contiguous run of them
  (runs differ by at most one micro-batch; --micro-batch 1 balances to one sample);
* each micro-batch backpropagates the SUM of its per-sample losses divided by the global batch,
  the micro-batch gradients are summed in float64 and all-reduce-summed, so every step applies
  the full-batch mean gradient, bit for bit the same at every world size;
* SIGTERM only sets a flag; the flag travels in the same all-reduce as the gradients, so all
  ranks see it at the same step, finish that step, and rank 0 checkpoints before everyone exits
  0. A periodic checkpoint every --checkpoint-every steps bounds what a SIGKILL loses.

Without WORLD_SIZE it runs as a single process, and outside a broker `report_progress` does
nothing, so `python train.py` works on a laptop. See README.md.
"""

from __future__ import annotations

# The broker may stop an attempt while it is still importing torch: install the stop flag first,
# so that such an attempt, too, stops at a step boundary and exits 0.
import signal

_stop_requested = False


def _request_stop(signum: int, frame: object) -> None:
    global _stop_requested
    _stop_requested = True


signal.signal(signal.SIGTERM, _request_stop)
signal.signal(signal.SIGINT, _request_stop)

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

CHECKPOINT_NAME = "checkpoint.pt"
NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
TRAIN_SIZE = 4096
TEST_SIZE = 1024
DATA_SEED = 20240601  # the data set is the same for every --seed; --seed drives init and order


def log(msg: str) -> None:
    print(f"[elastic-cifar] {msg}", flush=True)


# ---------------------------------------------------------------- configuration and environment


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="total optimizer steps of the job")
    p.add_argument("--global-batch", type=int, default=64, help="samples per step, all ranks")
    p.add_argument(
        "--micro-batch",
        type=int,
        default=8,
        help="fixed gradient cut of the global batch; the unit ranks share",
    )
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0, help="model init and sample order")
    p.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints")
    p.add_argument("--report-every-s", type=float, default=2.0, help="seconds between reports")
    p.add_argument(
        "--checkpoint-dir",
        default="./checkpoints",
        help="used when FIREPOOL_CHECKPOINT_DIR is not set",
    )
    p.add_argument("--step-sleep-s", type=float, default=0.0, help="artificial delay per step")
    p.add_argument("--log-every", type=int, default=50, help="steps between loss lines")
    p.add_argument(
        "--pg-timeout-s", type=float, default=600.0, help="rendezvous and collective timeout"
    )
    args = p.parse_args(argv)
    if min(args.steps, args.global_batch, args.micro_batch, args.checkpoint_every) < 1:
        p.error("--steps, --global-batch, --micro-batch and --checkpoint-every must be positive")
    return args


def rank_and_world() -> tuple[int, int]:
    if "WORLD_SIZE" not in os.environ:
        return 0, 1
    world = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ.get("RANK", "0"))
    if world < 1 or not 0 <= rank < world:
        raise SystemExit(f"bad rank environment: RANK={rank} WORLD_SIZE={world}")
    return rank, world


def checkpoint_dir(args: argparse.Namespace) -> Path:
    return Path(os.environ.get("FIREPOOL_CHECKPOINT_DIR") or args.checkpoint_dir)


def progress_reporter() -> Callable[..., Any] | None:
    """firepool's `report_progress`, or None where firepool is not installed."""
    try:
        from firepool.client import report_progress
    except ImportError:
        return None
    return report_progress


# ---------------------------------------------------------------------------------- data, model


def make_dataset() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic CIFAR: one smooth random prototype per class, per-sample contrast, brightness
    and a shift of up to 2 pixels, plus heavy pixel noise. Learnable, but not in a few steps."""
    g = torch.Generator().manual_seed(DATA_SEED)
    coarse = torch.randn(NUM_CLASSES, 3, 8, 8, generator=g)
    protos = 0.5 * F.interpolate(coarse, size=IMAGE_SHAPE[1:], mode="bilinear", align_corners=False)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(NUM_CLASSES, (n,), generator=g)
        contrast = 0.5 + torch.rand(n, 1, 1, 1, generator=g)
        bright = 0.3 * torch.randn(n, 3, 1, 1, generator=g)
        x = protos[y] * contrast + bright
        shifts = torch.randint(-2, 3, (n, 2), generator=g)
        for i in range(n):  # a few thousand small rolls: ~50 ms
            x[i] = torch.roll(x[i], shifts=(int(shifts[i, 0]), int(shifts[i, 1])), dims=(1, 2))
        x = x + 2.0 * torch.randn(x.shape, generator=g)
        return x.contiguous(), y

    x_train, y_train = draw(TRAIN_SIZE)
    x_test, y_test = draw(TEST_SIZE)
    return x_train, y_train, x_test, y_test


def global_batch_indices(seed: int, step: int, global_batch: int) -> torch.Tensor:
    """Training-set indices of step `step`: a function of (seed, step) alone. Samples are taken
    without replacement from a per-epoch permutation seeded by (seed, epoch)."""
    first = step * global_batch
    out = []
    pos = first
    while pos < first + global_batch:
        epoch, offset = divmod(pos, TRAIN_SIZE)
        perm = _epoch_permutation(seed, epoch)
        take = min(TRAIN_SIZE - offset, first + global_batch - pos)
        out.append(perm[offset : offset + take])
        pos += take
    return torch.cat(out)


_perm_cache: dict[tuple[int, int], torch.Tensor] = {}


def _epoch_permutation(seed: int, epoch: int) -> torch.Tensor:
    key = (seed, epoch)
    if key not in _perm_cache:
        if len(_perm_cache) > 4:
            _perm_cache.clear()
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        _perm_cache[key] = torch.randperm(TRAIN_SIZE, generator=g)
    return _perm_cache[key]


def rank_share(total: int, rank: int, world: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous share of `total` items; sizes differ by at most 1."""
    base, extra = divmod(total, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class SmallCNN(nn.Module):
    """No batch norm and no dropout: a sample's loss does not depend on which rank sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.fc1 = nn.Linear(128 * 4 * 4, 256)
        self.fc2 = nn.Linear(256, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(x), 256):
        logits = model(x[i : i + 256])
        loss_sum += float(F.cross_entropy(logits, y[i : i + 256], reduction="sum"))
        correct += int((logits.argmax(1) == y[i : i + 256]).sum())
    model.train()
    return loss_sum / len(x), correct / len(x)


# ---------------------------------------------------------------------------------- checkpoints


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomic: a reader (or the next attempt after a SIGKILL) sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    for stale in path.parent.glob(f"{path.name}.tmp.*"):  # left by a killed writer
        stale.unlink(missing_ok=True)
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


# ------------------------------------------------------------------------------------- training


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rank, world = rank_and_world()
    distributed = world > 1
    if distributed:
        dist.init_process_group(
            "gloo",
            init_method="env://",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=args.pg_timeout_s),
        )
    try:
        return train(args, rank, world, distributed)
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()


def train(args: argparse.Namespace, rank: int, world: int, distributed: bool) -> int:
    ckpt_path = checkpoint_dir(args) / CHECKPOINT_NAME

    # Rank 0 reads the checkpoint and hands it to the others: the directory need not be shared.
    state = load_checkpoint(ckpt_path) if rank == 0 else None
    if distributed:
        box = [state]
        dist.broadcast_object_list(box, src=0)
        state = box[0]

    # What fixes the sample stream and the arithmetic comes from the checkpoint once there is one.
    seed, global_batch, micro_batch = args.seed, args.global_batch, args.micro_batch
    if state is not None:
        for name, ours in (
            ("seed", seed),
            ("global_batch", global_batch),
            ("micro_batch", micro_batch),
        ):
            if state[name] != ours and rank == 0:
                flag = "--" + name.replace("_", "-")
                log(f"warning: checkpoint has {name}={state[name]}, ignoring {flag}={ours}")
        seed, global_batch, micro_batch = (
            state["seed"],
            state["global_batch"],
            state["micro_batch"],
        )

    torch.manual_seed(seed)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    step = 0
    attempts = 1
    history: list[dict[str, Any]] = []
    result: dict[str, Any] | None = None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        step = state["step"]
        attempts = state["attempts"] + 1
        history = list(state["history"])
        result = state.get("result")
    history.append(
        {"attempt": os.environ.get("FIREPOOL_ATTEMPT"), "world_size": world, "start_step": step}
    )
    log(
        f"attempt {attempts} start: rank={rank} world_size={world} resumed_step={step} "
        f"steps={args.steps} global_batch={global_batch}"
    )

    def snapshot(extra: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "samples_seen": step * global_batch,
            "seed": seed,
            "global_batch": global_batch,
            "micro_batch": micro_batch,
            "torch_rng": torch.get_rng_state(),
            "attempts": attempts,
            "history": history,
            "result": extra,
        }

    if step >= args.steps:  # a relaunch of a finished job
        if rank == 0:
            if result is None:  # finished by an older --steps: evaluate now
                result = final_result(model, step, args.steps, attempts, history, None)
            print("RESULT " + json.dumps(result), flush=True)
        return 0

    x_train, y_train, x_test, y_test = make_dataset()
    # The global batch is cut into fixed micro-batches (the same cut at every world size); a rank
    # takes a contiguous run of them. Each micro-batch's gradient is added into a float64 sum, and
    # the float64 sums are all-reduced: adding a handful of float32 values in float64 is exact
    # (unless they differ by more than about 2**26), so the order, and thus W, leaves the float32
    # gradient the optimizer sees. Resuming at another world size is bit-for-bit the same run.
    chunks = [
        (lo, min(lo + micro_batch, global_batch)) for lo in range(0, global_batch, micro_batch)
    ]
    first_chunk, end_chunk = rank_share(len(chunks), rank, world)
    my_chunks = chunks[first_chunk:end_chunk]
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    # One all-reduce per step: [gradients..., loss sum, correct, stop flag]. The flag is summed:
    # a value > 0 means some rank was asked to stop (the MAX of 0/1 flags, in the same call).
    buf = torch.zeros(numel + 3, dtype=torch.float64)
    views = []
    offset = 0
    for p in params:
        views.append(buf[offset : offset + p.numel()].view_as(p))
        offset += p.numel()

    report = progress_reporter() if rank == 0 else None
    attempt_start = time.monotonic()
    # Throughput is measured over the window since the previous report (this attempt only).
    last_report, last_report_step = attempt_start, step
    first_step_of_attempt = True
    last_loss = float("nan")
    stopped = stop = False

    model.train()
    while step < args.steps:
        indices = global_batch_indices(seed, step, global_batch)
        buf.zero_()
        for lo, hi in my_chunks:
            idx = indices[lo:hi]
            for p in params:
                p.grad = None
            logits = model(x_train[idx])
            loss_sum = F.cross_entropy(logits, y_train[idx], reduction="sum")
            (loss_sum / global_batch).backward()
            for view, p in zip(views, params, strict=True):
                view.add_(p.grad)
            buf[numel] += float(loss_sum.detach())
            buf[numel + 1] += float((logits.argmax(1) == y_train[idx]).sum())
        buf[numel + 2] = 1.0 if _stop_requested else 0.0
        if distributed:
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        for view, p in zip(views, params, strict=True):
            p.grad = view.to(torch.float32)
        optimizer.step()
        step += 1
        last_loss = float(buf[numel]) / global_batch
        stop = float(buf[numel + 2]) > 0

        if args.step_sleep_s > 0:
            time.sleep(args.step_sleep_s)

        if rank == 0:
            now = time.monotonic()
            if step % args.log_every == 0:
                acc = float(buf[numel + 1]) / global_batch
                log(f"step {step}/{args.steps} loss {last_loss:.4f} batch_acc {acc:.3f}")
            if report is not None and first_step_of_attempt:
                # The first step pays for warm-up (first all-reduce, allocator, caches): report
                # that the restore is over, but measure throughput from here on.
                report(step=step, samples_per_s=None, fraction=min(step / args.steps, 1.0))
                last_report, last_report_step = now, step
            elif report is not None and now - last_report >= args.report_every_s:
                rate = (step - last_report_step) * global_batch / max(now - last_report, 1e-9)
                report(step=step, samples_per_s=rate, fraction=min(step / args.steps, 1.0))
                last_report, last_report_step = now, step
            first_step_of_attempt = False
            if step % args.checkpoint_every == 0 and step < args.steps and not stop:
                save_checkpoint(ckpt_path, snapshot())

        if stop and step < args.steps:
            stopped = True
            break

    if stopped:
        if rank == 0:
            save_checkpoint(ckpt_path, snapshot())
            log(f"stop requested: checkpointed step {step}, exiting")
        if distributed:
            dist.barrier()
        return 0

    if rank == 0:
        result = final_result(model, step, args.steps, attempts, history, last_loss, x_test, y_test)
        save_checkpoint(ckpt_path, snapshot(result))
        if report is not None:
            now = time.monotonic()
            rate = (step - last_report_step) * global_batch / max(now - last_report, 1e-9)
            report(step=step, samples_per_s=rate, fraction=1.0)
        log(
            f"done: {step} steps, {step - history[-1]['start_step']} in this attempt, "
            f"{time.monotonic() - attempt_start:.1f}s"
        )
    if distributed:
        dist.barrier()
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    return 0


def final_result(
    model: nn.Module,
    step: int,
    total: int,
    attempts: int,
    history: list[dict[str, Any]],
    train_loss: float | None,
    x_test: torch.Tensor | None = None,
    y_test: torch.Tensor | None = None,
) -> dict[str, Any]:
    if x_test is None or y_test is None:
        _, _, x_test, y_test = make_dataset()
    test_loss, test_acc = evaluate(model, x_test, y_test)
    return {
        "steps": step,
        "total_steps": total,
        "final_train_loss": train_loss,
        "test_loss": round(test_loss, 6),
        "test_accuracy": round(test_acc, 6),
        "attempts": attempts,
        "world_sizes": [h["world_size"] for h in history],
    }


if __name__ == "__main__":
    sys.exit(main())

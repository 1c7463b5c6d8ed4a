"""`python -m firepool.bench standby`: the GPU handover on real local pods, on a fake card
(the default) or on the machine's real one (`--accelerator nvidia`).

One card. A job holds it; another caller's job is submitted behind it; the first job
ends. Measured per handover, with this machine's wall clock:
- handover wait: the first job's last instruction (it prints `time.time()` as it exits) ->
  the next job's first instruction (it prints `time.time()` first);
- promotion -> first instruction (standby arm): the instant the core passed the card's gate to
  the standby (the first job's verdict, written in the same core step) -> the next job's
  first instruction. The broker paper reports a 0.81 s promotion wait on H200.
Arms: `standby` (one standby per active pod: the next job claims it and is promoted) and
`none` (no standby: the first job's pod retires and the next job waits for a new pod). Both
arms run in one invocation, alternating, so the machine's noise hits both alike.

On a real card (found by NVML, `backends/gpus.py`) the holding job takes a CUDA context and
256 MiB of device memory first (`testing/gpu_probe.py`, through the driver), so the handover
includes what a real job's exit costs: the driver tearing its context down before the card's
gate lets the next pod run.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from firepool.backends.gpus import Device, discover
from firepool.bench.common import machine, median, percentile, print_table, write_json
from firepool.model import ACCELERATORS, NetworkAccess, PodRole, PodState, PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing import gpu_probe
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job
from firepool.testing.switch import Switch

FIRST = "import time; print(repr(time.time()), flush=True)"
#: Device memory the holding job takes on a real card.
HOLDER_MIB = 256


@dataclass(frozen=True)
class Venue:
    """The card the handovers run on: a fake one, or a real one the backend discovers."""

    accelerator: str  # the pool's accelerator: "fake" or the card's model (model.ACCELERATORS)
    device: Device | None = None  # the real card; None for the fake one
    how: str = "fake"  # how the card was found: "fake", "nvml" or "nvidia-smi"

    @property
    def fake_devices(self) -> list[str] | None:
        """The backend's fake cards; None lets it discover the machine's real ones."""
        return ["GPU-bench-0"] if self.device is None else None


FAKE = Venue("fake")


def real_venue() -> Venue:
    """The machine's first NVIDIA card, or a RuntimeError saying why there is none to use."""
    devices, how = discover()
    if not devices:
        raise RuntimeError("no NVIDIA device found (neither pynvml nor nvidia-smi saw one)")
    device = devices[0]
    if device.model not in ACCELERATORS:
        raise RuntimeError(f"card {device.name or device.model!r} is no known accelerator model")
    return Venue(device.model, device, how)


def _pool(standbys: int, accelerator: str = "fake") -> PoolSpec:
    # network host: the held job waits on a loopback switch (testing/switch.py). No host
    # memory cap on a real card: where no cgroup can be had the agent falls back to
    # RLIMIT_AS, and a CUDA context reserves far more address space than any such cap.
    return PoolSpec(name="gpu", network=NetworkAccess.HOST, accelerator=accelerator,
                    accelerators_per_pod=1, min_count=1,
                    max_idle_count=1, max_count=1, standbys_per_active=standbys,
                    caller_hold_seconds=0.0, idle_timeout=600.0,
                    memory_mib_per_pod=512 if accelerator == "fake" else 0, step=1)


def _holder(switch: Switch, venue: Venue) -> list[str]:
    """The first job: it waits for the switch, then prints `time.time()` as it exits; on a
    real card it holds a CUDA context and device memory all the while."""
    if venue.device is None:
        return switch.job("print(repr(time.time()), flush=True)")
    return gpu_probe.command(sys.executable, "--cuda", "driver", "--alloc-mib", str(HOLDER_MIB),
                             "--report", "none", "--wait", switch.url, "--stamp-exit")  # fmt: skip


def _wait(what: str, check: object, timeout: float = 120.0,
          on_timeout: object = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            seen = on_timeout() if on_timeout is not None else None  # type: ignore[operator]
            raise TimeoutError(f"{what}; saw {seen}")
        time.sleep(0.01)


def _pods(broker: BrokerThread) -> list[tuple[PodRole, PodState]]:
    tracker = broker.embedded.broker.tracker
    return broker.call(lambda: [(p.role, p.state) for p in tracker.pool_pods("gpu")])


def _first_line(client: object, job: str) -> float:
    data = client.get(f"/v1/jobs/{job}/logs").json()["data"]  # type: ignore[attr-defined]
    return float(data.strip().splitlines()[0])


def handovers(standbys: int, count: int, venue: Venue = FAKE) -> list[dict[str, float]]:
    """`count` handovers on one broker; each is measured after the pool is staged again."""
    out: list[dict[str, float]] = []
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2,
                          exit_poll_s=0.5)
    # Staged: one idle pod for the holder and one per standby on the card (after a handover
    # the promoted pod retires with its job, and what is left on the card may all be standbys).
    staged = [PodState.IDLE] * (1 + standbys)
    with (
        tempfile.TemporaryDirectory(prefix="firepool-bench-") as tmp,
        running_broker(Path(tmp),
                       catalog=Catalog((_pool(standbys, venue.accelerator),),
                                       {venue.accelerator: 1}),
                       config=config, fake_devices=venue.fake_devices) as broker,
    ):
        alice, bob = broker.client("alice"), broker.client("bob")
        for _ in range(count):
            _wait("pool staged", lambda: [s for _r, s in _pods(broker)] == staged,
                  on_timeout=lambda: _pods(broker))
            switch = Switch()
            first = submit(alice, pool="gpu", command=_holder(switch, venue))
            _wait("holder running", lambda: any(s is PodState.RUNNING for _r, s in _pods(broker)))
            second = submit(bob, pool="gpu", command=[sys.executable, "-c", FIRST])
            if standbys:
                _wait("standby claimed", lambda: any(
                    r is PodRole.STANDBY and s is PodState.ASSIGNED for r, s in _pods(broker)))
            else:
                time.sleep(0.5)  # the next job is queued behind the card
            switch.open()
            held = wait_job(alice, first, timeout=120)
            nxt = wait_job(bob, second, timeout=180)
            switch.close()
            if held["state"] != "SUCCEEDED" or nxt["state"] != "SUCCEEDED":
                raise RuntimeError(f"handover failed: {held['state']}, {nxt['state']}")
            ended, began = _first_line(alice, first), _first_line(bob, second)
            out.append({
                "handover_s": began - ended,
                "promotion_to_first_s": began - held["timings"]["finished"],
                "path": 1.0 if nxt["pods"][0]["acquisition"] == "standby" else 0.0,
            })
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench standby")
    parser.add_argument("--handovers", type=int, default=5, help="per arm and round")
    parser.add_argument("--rounds", type=int, default=2, help="arms alternate this many times")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--accelerator", choices=("fake", "nvidia"), default="fake",
                        help="fake: a fake card (default); nvidia: the machine's first real "
                        "card, found by NVML or nvidia-smi")  # fmt: skip
    args = parser.parse_args(argv)
    if args.accelerator == "nvidia":
        try:
            venue = real_venue()
        except RuntimeError as err:
            print(f"--accelerator nvidia: {err}", file=sys.stderr)
            return 2
    else:
        venue = FAKE
    result = run(args.handovers, args.rounds, venue)
    card = "fake GPU" if venue.device is None else f"{venue.device.name} ({venue.how})"
    print_table(
        f"GPU handover on real local pods, {card} ({result['handovers_per_arm']} per arm; "
        "seconds)",
        table_rows(result),
    )
    write_json(args.json_path, result)
    return 0


def run(count: int, rounds: int, venue: Venue = FAKE) -> dict[str, object]:
    """Both arms, `rounds` times alternating, `count` handovers each: the flat result."""
    runs: dict[str, list[dict[str, float]]] = {"standby": [], "none": []}
    for _ in range(rounds):
        runs["standby"] += handovers(1, count, venue)
        runs["none"] += handovers(0, count, venue)
    sb = runs["standby"]
    none = runs["none"]
    result: dict[str, object] = {
        "handovers_per_arm": len(sb),
        "standby_handover_s_p50": median([r["handover_s"] for r in sb]),
        "standby_handover_s_p90": percentile([r["handover_s"] for r in sb], 90),
        "standby_promotion_to_first_s_p50": median([r["promotion_to_first_s"] for r in sb]),
        "standby_promotion_to_first_s_p90": percentile(
            [r["promotion_to_first_s"] for r in sb], 90),
        "standby_path_share": sum(r["path"] for r in sb) / max(1, len(sb)),
        "none_handover_s_p50": median([r["handover_s"] for r in none]),
        "none_handover_s_p90": percentile([r["handover_s"] for r in none], 90),
        "machine": machine(),
        "host": socket.gethostname(),
        "accelerator": venue.accelerator,
        "device": None if venue.device is None else {
            "uuid": venue.device.uuid, "name": venue.device.name,
            "memory_mib": venue.device.memory_mib, "how": venue.how,
        },
    }
    return result


def table_rows(result: dict[str, object]) -> list[tuple[str, str, str]]:
    return [
        ("promotion -> first instruction p50 (standby)",
         f"{result['standby_promotion_to_first_s_p50']:.2f}", "paper 0.81 (H200)"),
        ("handover wait p50, standby",
         f"{result['standby_handover_s_p50']:.2f}", "-"),
        ("handover wait p50, no standby",
         f"{result['none_handover_s_p50']:.2f}", "-"),
        ("handover wait p90, standby / none",
         f"{result['standby_handover_s_p90']:.2f} / {result['none_handover_s_p90']:.2f}",
         "-"),
        ("share of next jobs on the standby", f"{result['standby_path_share']:.2f}", "1.00"),
    ]

"""`python -m firepool.bench standby`: the GPU handover on real local pods with fake GPUs.

One fake card. A job holds it; another caller's job is submitted behind it; the first job
ends. Measured per handover, with this machine's wall clock:
- handover wait: the first job's last instruction (it prints `time.time()` as it exits) ->
  the next job's first instruction (it prints `time.time()` first);
- promotion -> first instruction (standby arm): the instant the core passed the card's gate to
  the standby (the first job's verdict, written in the same core step) -> the next job's
  first instruction. The broker paper reports a 0.81 s promotion wait on H200.
Arms: `standby` (one standby per active pod: the next job claims it and is promoted) and
`none` (no standby: the first job's pod retires and the next job waits for a new pod). Both
arms run in one invocation, alternating, so the machine's noise hits both alike.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

from firepool.bench.common import machine, median, percentile, print_table, write_json
from firepool.model import NetworkAccess, PodRole, PodState, PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job
from firepool.testing.switch import Switch

FIRST = "import time; print(repr(time.time()), flush=True)"


def _pool(standbys: int) -> PoolSpec:
    # network host: the held job waits on a loopback switch (testing/switch.py)
    return PoolSpec(name="gpu", network=NetworkAccess.HOST, accelerator="fake",
                    accelerators_per_pod=1, min_count=1,
                    max_idle_count=1, max_count=1, standbys_per_active=standbys,
                    caller_hold_seconds=0.0, idle_timeout=600.0, memory_mib_per_pod=512, step=1)


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


def handovers(standbys: int, count: int) -> list[dict[str, float]]:
    """`count` handovers on one broker; each is measured after the pool is staged again."""
    out: list[dict[str, float]] = []
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2,
                          exit_poll_s=0.5)
    # Staged: one idle pod for the holder and one per standby on the card (after a handover
    # the promoted pod retires with its job, and what is left on the card may all be standbys).
    staged = [PodState.IDLE] * (1 + standbys)
    with (
        tempfile.TemporaryDirectory(prefix="firepool-bench-") as tmp,
        running_broker(Path(tmp), catalog=Catalog((_pool(standbys),), {"fake": 1}),
                       config=config, fake_devices=["GPU-bench-0"]) as broker,
    ):
        alice, bob = broker.client("alice"), broker.client("bob")
        for _ in range(count):
            _wait("pool staged", lambda: [s for _r, s in _pods(broker)] == staged,
                  on_timeout=lambda: _pods(broker))
            switch = Switch()
            first = submit(alice, pool="gpu",
                           command=switch.job("print(repr(time.time()), flush=True)"))
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
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"standby": [], "none": []}
    for _ in range(args.rounds):
        runs["standby"] += handovers(1, args.handovers)
        runs["none"] += handovers(0, args.handovers)
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
    }
    print_table(
        f"GPU handover on real local pods, fake GPU ({len(sb)} per arm; seconds)",
        [
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
        ],
    )
    write_json(args.json_path, result)
    return 0

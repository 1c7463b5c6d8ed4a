"""`python -m firepool.bench warm-start`: submit -> first instruction on a warm local pod.

The broker paper's appendix C.4 splits a warm start into accept, dispatch, hand-off and first
instruction (0.59 s on H200: 0.04 / 0.01 / 0.39 / 0.12). Here, per job:
- accept: the client's POST until the durable QUEUED row is acknowledged (client clock);
- dispatch: accepted -> the RUNNING row committed with its pod binding (`assigned`);
- hand-off: committed -> the attempt's process started by the pod agent (`started`);
- first instruction: process start -> the job's first Python statement, which prints
  `time.time()` (read back from the job's log).
Every job reuses the caller's warm pod (same lease tag); the first, cold job is not counted.
All clocks are this machine's wall clock.

The broker runs as `firepool serve`, in a process of its own, and the caller is the SDK
(`--broker serve`, the default): what a caller of a local broker sees. `--broker thread` runs
it on a thread of the benchmark's process instead, polled with raw HTTP, as the figures up to
2026-12-07 were taken; `--broker-rounds N` alternates the two.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from firepool.bench.common import machine, percentile, print_table, write_json
from firepool.bench.warm_start_parts import measure, measure_served


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench warm-start")
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--store", default=None, help="database URL (default: SQLite)")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument(
        "--network-rounds",
        type=int,
        default=0,
        help="instead: alternate this many rounds with and without the pods' network namespace",
    )
    parser.add_argument(
        "--kubernetes",
        action="store_true",
        help="instead: the local backend and a real Kubernetes node (the test cluster's) in "
        "alternated rounds, and a fresh pod's create -> ready by phase",
    )
    parser.add_argument(
        "--broker",
        choices=("serve", "thread"),
        default="serve",
        help="serve: `firepool serve` in a process of its own, driven by the SDK (what a "
        "caller sees); thread: the broker on a thread of this process, polled (the method of "
        "the figures before 2026-12-07)",
    )
    parser.add_argument(
        "--broker-rounds",
        type=int,
        default=0,
        help="instead: alternate this many rounds of --broker serve and --broker thread",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --kubernetes")
    parser.add_argument("--cold", type=int, default=5, help="fresh pods, with --kubernetes")
    args = parser.parse_args(argv)
    if args.kubernetes:
        from firepool.bench.warm_start_node import compare_kubernetes

        return compare_kubernetes(args)
    if args.network_rounds:
        return compare_network(args)
    if args.broker_rounds:
        return compare_brokers(args)
    if args.broker == "serve":
        parts = measure_served(args.jobs, args.store)
    else:
        parts = measure(args.jobs, args.store)
    ms = {k: [v * 1000.0 for v in vals] for k, vals in parts.items()}
    result: dict[str, object] = {
        "jobs": len(ms["total"]),
        "total_ms_p50": percentile(ms["total"], 50),
        "total_ms_p90": percentile(ms["total"], 90),
        "accept_ms_p50": percentile(ms["accept"], 50),
        "dispatch_ms_p50": percentile(ms["dispatch"], 50),
        "handoff_ms_p50": percentile(ms["handoff"], 50),
        "first_instruction_ms_p50": percentile(ms["first"], 50),
        "total_ms_mean": statistics.fmean(ms["total"]) if ms["total"] else float("nan"),
        "broker": args.broker,
        "machine": machine(),
    }
    print_table(
        f"warm start, {result['jobs']} jobs on a warm local pod, broker: {args.broker} (p50, ms)",
        [
            ("submit -> first instruction", f"{result['total_ms_p50']:.1f}", "<= 30"),
            ("  accept", f"{result['accept_ms_p50']:.1f}", "paper 40"),
            ("  dispatch (decision + durable commit)", f"{result['dispatch_ms_p50']:.1f}", "<= 5"),
            ("  hand-off", f"{result['handoff_ms_p50']:.1f}", "paper 390"),
            ("  first instruction", f"{result['first_instruction_ms_p50']:.1f}", "paper 120"),
            ("p90 total", f"{result['total_ms_p90']:.1f}", "-"),
        ],
    )
    write_json(args.json_path, result)
    return 0


def alternated(
    variants: dict[str, Callable[[], dict[str, list[float]]]], rounds: int
) -> dict[str, list[float]]:
    """Each variant's total p50 (ms) per round, the variants alternated (a, b, b, a, ...) so
    that a machine slowing down or speeding up over the run weighs on both alike."""
    names = list(variants)
    out: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            total = [v * 1000.0 for v in variants[name]()["total"]]
            out[name].append(percentile(total, 50))
    return out


@dataclass(frozen=True)
class Variant:
    """One side of an alternated comparison: its name in the JSON, its row in the table."""

    name: str
    label: str
    target: str
    measure: Callable[[], dict[str, list[float]]]


@dataclass(frozen=True)
class Contrast:
    """What a comparison reports of its two medians (first, second): the JSON key, the
    table's row and target, and `spec` (a format spec) for the value shown."""

    key: str
    label: str
    of: Callable[[float, float], float]
    spec: str
    target: str


def compare(
    args: argparse.Namespace, count: int, first: Variant, second: Variant, contrast: Contrast
) -> int:
    """`count` alternated rounds of the two variants: each one's median of its rounds' total
    p50, and `contrast` of the two medians."""
    variants = (first, second)
    rounds = alternated({v.name: v.measure for v in variants}, count)
    medians = {v.name: statistics.median(rounds[v.name]) for v in variants}
    value = contrast.of(medians[first.name], medians[second.name])
    result: dict[str, object] = {
        "rounds": count,
        "jobs_per_round": args.jobs,
        "total_ms_p50_per_round": rounds,
        **{f"total_ms_p50_{name}": m for name, m in medians.items()},
        contrast.key: value,
        "machine": machine(),
    }
    print_table(
        f"warm start p50, {count} alternated rounds of {args.jobs} jobs (ms)",
        [
            *((f"{v.label} (median of rounds)", f"{medians[v.name]:.2f}", v.target)
              for v in variants),
            (contrast.label, format(value, contrast.spec), contrast.target),
            *((f"rounds, {v.name}", " ".join(f"{r:.1f}" for r in rounds[v.name]), "-")
              for v in variants),
        ],
    )  # fmt: skip
    write_json(args.json_path, result)
    return 0


def compare_brokers(args: argparse.Namespace) -> int:
    """The broker as `firepool serve` against the broker on this process's thread, in
    alternated rounds: how much of a warm start the earlier method's setting added."""
    return compare(
        args,
        args.broker_rounds,
        Variant("serve", "firepool serve + SDK", "<= 6",
                lambda: measure_served(args.jobs, args.store)),
        Variant("thread", "broker thread, polled", "-", lambda: measure(args.jobs, args.store)),
        Contrast("serve_over_thread", "serve / thread", lambda s, t: s / t, ".2f", "-"),
    )  # fmt: skip


def compare_network(args: argparse.Namespace) -> int:
    """What the pods' network namespace costs a warm start: rounds alternated side by side
    (own namespace, host network, own, ...), the difference of the medians of each round's
    total p50."""
    return compare(
        args,
        args.network_rounds,
        Variant("namespace", "own network namespace", "-",
                lambda: measure(args.jobs, args.store, True)),
        Variant("host", "host network", "-", lambda: measure(args.jobs, args.store, False)),
        Contrast("namespace_cost_ms", "cost of the namespace", lambda own, host: own - host,
                 "+.2f", "<= +1"),
    )  # fmt: skip

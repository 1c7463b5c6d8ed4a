"""`python -m firepool.bench policy`: decision time per round of every round policy.

What is timed: one `policy.decide(round_input)` call, i.e. validation and flattening of the
round, utility computation, model build and solve (MILP or NSGA-II) and the result mapping.
Building the synthetic round itself (goodput model evaluation) is not timed: in the service the
goodput estimates are maintained incrementally as progress reports arrive.

Scales: small = 12 GPUs (one type) / 14 jobs / 10 configurations per job (the paper's testbed);
large = 1,000 GPUs of 3 types / 500 jobs / 10 configurations per job. Pollux's published
100 x 100 NSGA-II budget is run at the small scale; at the large scale it is bounded by
`--pollux-large-budget POPxGEN` (default 20x20) and the bound is printed, never hidden.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from firepool.bench.common import machine, median, percentile, print_table, write_json
from firepool.scheduling import (
    POLICY_NAMES,
    OakNsga2Policy,
    OakPolicy,
    PolluxPolicy,
    RoundInput,
    RoundPolicy,
    make_policy,
)
from firepool.scheduling.synthetic import large_round, small_round

_TARGETS = {("oak", "small"): 2.0, ("oak", "large"): 100.0, ("oak-nsga2", "small"): 50.0}


def _time_rounds(policy: RoundPolicy, rounds: Sequence[RoundInput]
                 ) -> tuple[list[float], list[float]]:
    """Wall-clock and process-CPU milliseconds per decision.

    CPU time is reported next to wall time because on a shared machine other tenants' load
    inflates wall time; the policies are single-threaded, so CPU time approximates the wall
    time of an idle machine.
    """
    wall, cpu = [], []
    for r in rounds:
        start, start_cpu = time.perf_counter(), time.process_time()
        policy.decide(r)
        cpu.append((time.process_time() - start_cpu) * 1e3)
        wall.append((time.perf_counter() - start) * 1e3)
    return wall, cpu


def _policy(name: str, scale: str, pollux_budget: tuple[int, int]) -> RoundPolicy:
    if name == "pollux" and scale == "large":
        return PolluxPolicy(pop_size=pollux_budget[0], n_gen=pollux_budget[1])
    return make_policy(name)


def _rounds_for(name: str, scale: str, args: argparse.Namespace) -> int:
    if name == "pollux":
        return int(args.pollux_rounds)
    slow = name == "oak-nsga2"
    if scale == "small":
        return int(args.small_rounds_nsga if slow else args.small_rounds)
    return int(args.large_rounds_nsga if slow else args.large_rounds)


def quality(rounds: Sequence[RoundInput]) -> tuple[float, float, float]:
    """oak-nsga2 objective / MILP optimum: mean, worst, and mean of gains above idle."""
    full, gains = [], []
    milp, hybrid = OakPolicy(), OakNsga2Policy()
    for r in rounds:
        best = milp.decide(r).objective
        got = hybrid.decide(r).objective
        idle = milp.params.mu_na * len(r.jobs)
        full.append(got / best)
        if best - idle > 0:
            gains.append((got - idle) / (best - idle))
    return float(np.mean(full)), float(np.min(full)), float(np.mean(gains))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m firepool.bench policy", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", default=None, help="write flat results to this path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=",".join(POLICY_NAMES))
    parser.add_argument("--small-rounds", type=int, default=200)
    parser.add_argument("--small-rounds-nsga", type=int, default=20)
    parser.add_argument("--large-rounds", type=int, default=15)
    parser.add_argument("--large-rounds-nsga", type=int, default=5)
    parser.add_argument("--pollux-rounds", type=int, default=5,
                        help="rounds timed for Pollux at each scale (about 1.5 s each at 100x100)")
    parser.add_argument(
        "--pollux-large-budget",
        default="20x20",
        help="NSGA-II POPxGEN for Pollux at 500 jobs (published: 100x100)",
    )
    parser.add_argument("--skip-large", action="store_true")
    args = parser.parse_args(argv)
    pop, gen = (int(v) for v in args.pollux_large_budget.lower().split("x"))
    names = [n for n in args.policies.split(",") if n]

    rng = np.random.default_rng(args.seed)
    need_small = max(args.small_rounds, args.small_rounds_nsga)
    small = [small_round(rng) for _ in range(need_small)]
    need_large = 0 if args.skip_large else max(args.large_rounds, args.large_rounds_nsga)
    large = [large_round(rng) for _ in range(need_large)]

    result: dict[str, object] = {
        "machine": machine(),
        "timed": "policy.decide: model build + solve",
        "pollux_large_budget": f"{pop}x{gen}",
    }
    rows: list[tuple[str, str, str]] = []
    for name in names:
        for scale, rounds in (("small", small), ("large", large)):
            if not rounds:
                continue
            policy = _policy(name, scale, (pop, gen))
            policy.decide(rounds[0])  # warm-up: imports, caches
            times, cpu = _time_rounds(policy, rounds[: _rounds_for(name, scale, args)])
            p50, p95 = median(times), percentile(times, 95)
            key = f"{name.replace('-', '_')}_{scale}"
            result[f"{key}_ms_p50"] = round(p50, 3)
            result[f"{key}_ms_p95"] = round(p95, 3)
            result[f"{key}_cpu_ms_p50"] = round(median(cpu), 3)
            target = _TARGETS.get((name, scale))
            label = f"{name} {scale} ({len(times)} rounds)"
            if name == "pollux" and scale == "large":
                label += f" [bounded {pop}x{gen}]"
            rows.append(
                (
                    label,
                    f"p50 {p50:.2f} / p95 {p95:.2f} ms (cpu p50 {median(cpu):.2f})",
                    f"<= {target:g} ms" if target else "-",
                )
            )
    if "oak-nsga2" in names:
        mean, worst, gain = quality(small[: args.small_rounds_nsga])
        result["oak_nsga2_small_utility_ratio_mean"] = round(mean, 4)
        result["oak_nsga2_small_utility_ratio_min"] = round(worst, 4)
        result["oak_nsga2_small_gain_ratio_mean"] = round(gain, 4)
        rows.append(
            ("oak-nsga2 / MILP utility (small)", f"mean {mean:.3f}, min {worst:.3f}", ">= 0.90")
        )
        rows.append(("  same, gain above idle (mu_na)", f"mean {gain:.3f}", "-"))
    print_table("round policy decision time (policy.decide = model build + solve)", rows)
    write_json(args.json, result)
    return 0

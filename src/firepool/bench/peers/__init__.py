"""`python -m firepool.bench peers`: firepool side by side with what users would pick instead.

The same three workloads run on five systems, one after another in one run:
(a) firepool, local pods, reuse on; (b) firepool, a fresh pod per job; (c) a fresh subprocess
per job, no broker; (d) a Ray actor pool of persistent workers (no reset between jobs);
(e) Ray tasks. The workloads:
- a stream of `--short-jobs` trivially short jobs, one after another from one caller: per-job
  overhead = submit -> done (firepool: terminal state committed) minus the job's own run time
  (first instruction to last), start = submit -> first instruction, and the stream's makespan.
  A fresh pod per job costs a pod start each, so that system runs the first
  `--fresh-short-jobs` of the stream and its makespan is stated per job;
- the demo's W-Agent (2 agents) and W-RL loops (`sim.agentic`, the same seeded job sequences
  for every system), bodies and pauses scaled by `--scale`: makespan;
- the hostile-job probe: caller A's job leaves a file in /tmp and a daemon (own session);
  then caller B's job looks for both. Each one found is a leak. firepool's probe pool has one
  pod and no owner hold, so with reuse on B's job runs on the very pod A's used, after reset.

Job bodies are Python source run as `python -c` (firepool, subprocess) or exec'd in the worker
(Ray), each printing its first and last instruction's wall-clock time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firepool.bench.common import machine, median, percentile, print_table, write_json
from firepool.bench.peers import jobs
from firepool.bench.peers.systems import Firepool, RayPool, RayTasks, Subprocess, System
from firepool.sim.agentic import Tagger, w_agent, w_rl
from firepool.sim.programs import Program, Run, Sleep

SYSTEMS = ("firepool_reuse", "firepool_fresh", "subprocess", "ray_pool", "ray_task")
LOOPS = {
    "agent": ("agent-0", "agent-1"),  # W-Agent, 2 agents
    "rl": ("trainer",),  # W-RL
}
STREAM_CALLER = "stream"
PROBE_CALLERS = ("probe-a", "probe-b")
TARGET_OVERHEAD_MS = 12.0
TARGET_SPEEDUP = 10.0


@dataclass
class Measured:
    name: str
    label: str
    overhead_ms: list[float] = field(default_factory=list)
    start_ms: list[float] = field(default_factory=list)
    stream_jobs: int = 0
    stream_makespan_s: float = 0.0
    loop_makespan_s: dict[str, float] = field(default_factory=dict)
    failed: int = 0
    #: The 1-minute load average when the short-job stream ended: the systems run one after
    #: another, so on a shared machine each met its own load.
    stream_load: float = 0.0
    leak_file: bool = False
    leak_daemon: bool = False
    same_caller_leaks: int = 0
    #: The next-caller round's daemon still alive on the host when that caller's job ended.
    daemon_on_host: bool = False
    #: Whether the looking job ran where the planting job had (True: next caller's round).
    probe_places: dict[bool, bool] = field(default_factory=dict)

    @property
    def leaks(self) -> int:
        return int(self.leak_file) + int(self.leak_daemon)

    @property
    def per_job_ms(self) -> float:
        return self.stream_makespan_s * 1000.0 / self.stream_jobs if self.stream_jobs else 0.0


def _programs(loop: str, seed: int) -> list[Program]:
    """The demo's programs, seeded per (seed, loop, caller): every system runs the same jobs."""
    tagger = Tagger("on", "peers")
    out: list[Program] = []
    for caller in LOOPS[loop]:
        rng = random.Random(f"{seed}/{loop}/{caller}")
        out.append(w_agent(tagger, rng, caller) if loop == "agent" else w_rl(tagger, rng, caller))
    return out


async def _drive(system: System, loop: str, program: Program, scale: float, m: Measured) -> None:
    command = next(program, None)
    while command is not None:
        if isinstance(command, Sleep):
            await asyncio.sleep(command.seconds * scale)
        elif isinstance(command, Run):
            outcomes = await asyncio.gather(
                *(
                    system.run(r.caller, jobs.sleep(r.duration * scale), stream=loop)
                    for r in command.jobs
                )
            )
            m.failed += sum(not o.ok for o in outcomes)
        try:
            command = program.send(None)
        except StopIteration:
            command = None


async def _stream(system: System, count: int, m: Measured) -> None:
    began = time.time()
    for _ in range(count):
        outcome = await system.run(STREAM_CALLER, jobs.short(), stream="short")
        if not outcome.ok:
            m.failed += 1
            continue
        t = jobs.timed(outcome.output)
        m.overhead_ms.append((outcome.done - outcome.submitted - t.run_s) * 1000.0)
        m.start_ms.append((t.first - outcome.submitted) * 1000.0)
    m.stream_jobs = count
    m.stream_makespan_s = time.time() - began
    m.stream_load = os.getloadavg()[0]


async def _probe(system: System, m: Measured) -> None:
    """Caller A plants, then caller B looks (the issue's probe: `<system>_leaks`); then A
    plants again and A's own next job looks (the same warm worker or pod, after its reset)."""
    a, b = PROBE_CALLERS
    for other in (True, False):
        probe_id = uuid.uuid4().hex[:12]
        round_ = "next" if other else "same"
        try:
            planted = await system.run(a, jobs.plant(probe_id), stream=round_, probe=round_)
            looked = await system.run(
                b if other else a, jobs.look(probe_id), stream=round_, probe=round_
            )
            if not (planted.ok and looked.ok):
                m.failed += 1
                continue
            found = jobs.leaks(looked.output)
            if other:
                m.leak_file, m.leak_daemon = found
                m.daemon_on_host = bool(_probe_daemons(probe_id))
            else:
                m.same_caller_leaks = sum(found)
            if planted.place and looked.place:
                m.probe_places[other] = planted.place == looked.place
        finally:
            clean_up_probe(probe_id)


def _probe_daemons(probe_id: str) -> list[int]:
    """The probe's daemons alive on this host, seen from here (a job in a PID namespace of
    its own would not see them: this says whether one survived at all)."""
    name = jobs.marker(probe_id).encode()
    found: list[int] = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if name in cmdline and b"import os" not in cmdline and state not in (b"Z", b"X"):
            found.append(int(pid))
    return found


def clean_up_probe(probe_id: str) -> None:
    """Whatever the probe left on this host (its daemons, the /tmp file) goes."""
    for pid in _probe_daemons(probe_id):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    Path("/tmp", jobs.marker(probe_id)).unlink(missing_ok=True)


def _make(name: str, root: Path, cap: int) -> System:
    if name == "firepool_reuse":
        return Firepool(root / name, reuse=True, cap=cap)
    if name == "firepool_fresh":
        return Firepool(root / name, reuse=False, cap=cap)
    if name == "subprocess":
        return Subprocess()
    if name == "ray_pool":
        return RayPool(cap)
    return RayTasks()


async def _measure(name: str, root: Path, args: argparse.Namespace, progress: Any) -> Measured:
    system = _make(name, root, args.cap)
    m = Measured(system.name, system.label)
    callers = [STREAM_CALLER, *PROBE_CALLERS, *(c for loop in args.loops for c in LOOPS[loop])]
    await system.start(callers)
    try:
        count = args.fresh_short_jobs if name == "firepool_fresh" else args.short_jobs
        progress(f"{name}: {count} short jobs")
        await _stream(system, count, m)
        for loop in args.loops:
            progress(f"{name}: {loop} loop")
            began = time.time()
            await asyncio.gather(
                *(_drive(system, loop, p, args.scale, m) for p in _programs(loop, args.seed))
            )
            m.loop_makespan_s[loop] = time.time() - began
        progress(f"{name}: probe")
        await _probe(system, m)
    finally:
        await system.stop()
    return m


async def _run(args: argparse.Namespace) -> list[Measured]:
    def progress(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    results: list[Measured] = []
    root = Path(tempfile.mkdtemp(prefix="firepool-peers-", dir=_scratch_root()))
    ray_up = False
    try:
        for name in args.systems:
            if name.startswith("ray") and not ray_up:
                import ray

                ray.init(num_cpus=args.cap, include_dashboard=False, log_to_driver=False)
                ray_up = True
            results.append(await _measure(name, root, args, progress))
    finally:
        if ray_up:
            import ray

            ray.shutdown()
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return results


def _scratch_root() -> Path:
    """Outside /tmp, as the demo's: a pod's private /tmp needs its state to live elsewhere."""
    root = Path.home() / ".cache" / "firepool"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _result(results: Sequence[Measured], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "short_jobs": args.short_jobs,
        "fresh_short_jobs": args.fresh_short_jobs,
        "scale": args.scale,
        "cap": args.cap,
        "seed": args.seed,
        "loadavg_1m_at_end": os.getloadavg()[0],
        "machine": machine(),
    }
    by_name = {m.name: m for m in results}
    for m in results:
        short = m.name
        out[f"{short}_overhead_ms"] = median(m.overhead_ms)
        out[f"{short}_overhead_ms_p90"] = percentile(m.overhead_ms, 90)
        out[f"{short}_start_ms_p50"] = percentile(m.start_ms, 50)
        out[f"{short}_start_ms_p90"] = percentile(m.start_ms, 90)
        out[f"{short}_short_stream_makespan_s"] = m.stream_makespan_s
        out[f"{short}_short_stream_jobs"] = m.stream_jobs
        out[f"{short}_short_stream_ms_per_job"] = m.per_job_ms
        for loop, seconds in m.loop_makespan_s.items():
            out[f"{short}_{loop}_loop_makespan_s"] = seconds
        out[f"{short}_leaks"] = m.leaks
        out[f"{short}_leak_file"] = m.leak_file
        out[f"{short}_leak_daemon"] = m.leak_daemon
        out[f"{short}_leaks_same_caller"] = m.same_caller_leaks
        out[f"{short}_daemon_alive_on_host"] = m.daemon_on_host
        for other, same in m.probe_places.items():
            out[f"{short}_probe_{'next' if other else 'same'}_caller_same_worker"] = same
        out[f"{short}_failed"] = m.failed
        out[f"{short}_stream_loadavg_1m"] = m.stream_load
    reuse, fresh = by_name.get("firepool_reuse"), by_name.get("firepool_fresh")
    if reuse and fresh:
        for loop in ("agent", "rl"):
            if loop in reuse.loop_makespan_s and loop in fresh.loop_makespan_s:
                out[f"{loop}_loop_speedup_vs_fresh_pod"] = (
                    fresh.loop_makespan_s[loop] / reuse.loop_makespan_s[loop]
                )
        if reuse.per_job_ms and fresh.per_job_ms:
            out["short_stream_speedup_vs_fresh_pod"] = fresh.per_job_ms / reuse.per_job_ms
    return out


def _print(results: Sequence[Measured], out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="peers (overhead and start: ms, medians / p90; makespans: s)")
    columns: tuple[str, ...] = ("system", "overhead", "start p50", "start p90", "stream", "ms/job")
    columns += ("load", "W-Agent", "W-RL", "leaks: next caller", "same caller")
    for col in columns:
        table.add_column(col, justify="left" if col == "system" else "right")
    for m in results:
        leaks = ", ".join(
            w for w, hit in (("/tmp file", m.leak_file), ("daemon", m.leak_daemon)) if hit
        )
        table.add_row(
            m.label,
            f"{median(m.overhead_ms):.1f}",
            f"{percentile(m.start_ms, 50):.1f}",
            f"{percentile(m.start_ms, 90):.1f}",
            f"{m.stream_makespan_s:.1f} / {m.stream_jobs} jobs",
            f"{m.per_job_ms:.1f}",
            f"{m.stream_load:.1f}",
            f"{m.loop_makespan_s['agent']:.1f}" if "agent" in m.loop_makespan_s else "-",
            f"{m.loop_makespan_s['rl']:.1f}" if "rl" in m.loop_makespan_s else "-",
            f"{m.leaks} ({leaks})" if leaks else "0",
            str(m.same_caller_leaks),
        )
    console = Console(width=None if Console().is_terminal else 150)
    console.print(table)
    rows = []
    if "firepool_reuse_overhead_ms" in out:
        rows.append(
            (
                "firepool per-job overhead, warm pod (ms)",
                f"{out['firepool_reuse_overhead_ms']:.1f}",
                f"<= {TARGET_OVERHEAD_MS:g}",
            )
        )
    for key in ("short_stream_speedup_vs_fresh_pod", "agent_loop_speedup_vs_fresh_pod"):
        if key in out:
            target = f">= {TARGET_SPEEDUP:g}x" if key.startswith("short") else "-"
            rows.append((key, f"{out[key]:.1f}x", target))
    if rows:
        print_table("peers: targets", rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench peers")
    parser.add_argument("--short-jobs", type=int, default=1000)
    parser.add_argument("--fresh-short-jobs", type=int, default=100)
    parser.add_argument("--scale", type=float, default=0.25, help="loop bodies and pauses x")
    parser.add_argument("--cap", type=int, default=4, help="pods / workers per system")
    parser.add_argument("--seed", type=int, default=2027)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--loops", default="agent,rl", help="comma list of agent, rl; or none")
    parser.add_argument("--quick", action="store_true", help="100 / 20 short jobs, scale 0.1")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    args.loops = [x for x in args.loops.split(",") if x and x != "none"]
    if any(x not in LOOPS for x in args.loops):
        parser.error(f"--loops: choose from {', '.join(LOOPS)} or none")
    if args.quick:
        args.short_jobs, args.fresh_short_jobs, args.scale = 100, 20, 0.1
    results = asyncio.run(_run(args))
    out = _result(results, args)
    _print(results, out)
    write_json(args.json_path, out)
    return 0 if all(m.failed == 0 for m in results) else 1

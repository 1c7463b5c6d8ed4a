"""`firepool experiment faults`: the broker loses nothing and runs nothing twice, whatever
dies. A bounded fault campaign under load, on real processes and a real database.

Method. One `firepool serve` (local pods, SQLite in its data directory or a private
PostgreSQL server) carries load for the whole campaign: the demo's loops (two W-Agent agents
and one W-RL trainer, the broker paper's programs, run again and again with their lease tags,
so owner holds come and go) and a stream of short jobs. Every job runs `evidence.JOB_BODY`,
which calls the campaign's own loopback server when it starts and when it ends its work and
prints a line naming its attempt at each. The faults come in phases, one kind at a time:

- broker: SIGKILL of the server's process group at a random point (a uniform gap between
  kills, so kills land anywhere in the jobs' lives), then a restart on the same port;
- store: the store unavailable for a few seconds (a private PostgreSQL server stopped with
  `-m fast` and started again; for SQLite, another connection holding the file's exclusive
  lock);
- partition: a pod's agent SIGSTOPped while it runs a job (alive but silent), resumed once
  the broker has moved the job on;
- agent: a pod's agent SIGKILLed while it runs a job.

Partition and agent faults hit a job of their own whose first attempt works longer than the
fault lasts (`victim_first_s`): the first attempt must be ended by the broker or its agent,
never completed, while the retry does the work.

Counted per kind, from the jobs submitted during its phase (`--json`: the totals):
- lost: accepted (the API answered with an id) but not SUCCEEDED once the campaign drains,
  or SUCCEEDED without its output (`output_incomplete`: its log lacks the begin and end
  lines of its final attempt);
- run twice: from the jobs' own calls only: more than one completed attempt, or one attempt
  id launched more than once;
- holds kept: owner holds seen just before a kill (expiring later than the restart can take)
  found after the restart with the same expiry, or claimed by their owner since (a job of
  theirs was assigned the pod after it was seen held, even if the pod has since retired by
  the session rule);
- restart to dispatch: the broker's own log line, process start of the broker (recovery
  included) to its first dispatch pass; also kill to the API answering again;
- longest delay: the worst job's time from submission to end beyond its own work.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from firepool.experiment.evidence import JOB_BODY, Evidence, expected_output
from firepool.experiment.fault_targets import ServeProcess, StoreOutage, agent_pid, lost_in_restart
from firepool.model import ConfigError
from firepool.sim.agentic import Tagger, w_agent, w_rl
from firepool.sim.programs import Program, Run, Sleep
from firepool.testing.private_db import PrivateServer, ServerError, start_private

POOL = "faults"
KINDS = ("broker", "store", "partition", "agent")
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}
Builder = Callable[[Tagger, random.Random, str], Program]


@dataclass(frozen=True)
class FaultCampaign:
    kills: int = 30
    store_restarts: int = 3
    partitions: int = 5
    agent_kills: int = 5
    jobs: int = 400  # the stream of short jobs, over the whole campaign
    store: str = "sqlite"  # or "postgresql": a private server the campaign may stop
    seed: int = 0
    stream_interval_s: float = 0.4
    stream_work_s: tuple[float, float] = (0.2, 1.0)
    loop_scale: float = 0.5  # the demo loops' bodies and pauses, scaled
    gap_s: tuple[float, float] = (2.0, 6.0)  # between faults of one phase (uniform)
    baseline_s: float = 15.0  # load without faults first
    outage_s: float = 4.0  # how long the store stays unavailable
    #: The broker and agent silence bound: the pool's keep-alive (30 s is the floor).
    idle_timeout_s: float = 30.0
    pool_max: int = 10
    max_retries: int = 3
    drain_s: float = 120.0  # after the last fault, for every job to end
    isolation: str = "auto"

    @property
    def victim_first_s(self) -> float:
        """A partition's or agent kill's first attempt works this long: past the agent's
        fence and the broker's lost window, so only a fault handled wrong lets it finish."""
        return self.idle_timeout_s * 2 + 30.0


@dataclass
class Submitted:
    id: str
    kind: str  # the phase it was submitted in
    caller: str
    submitted: float
    work_s: float  # its final attempt's work


@dataclass
class KindResult:
    kind: str
    faults: int = 0
    jobs: int = 0
    succeeded: int = 0
    lost: int = 0
    run_twice: int = 0
    output_incomplete: int = 0
    retried: int = 0
    holds_before: int = 0
    holds_kept: int = 0
    holds_broken: int = 0  # broken by the scaler's rule after the restart (not counted)
    restart_to_dispatch_ms: list[float] = field(default_factory=list)
    kill_to_api_s: list[float] = field(default_factory=list)
    longest_delay_s: float = 0.0
    notes: list[str] = field(default_factory=list)


class Campaign:
    def __init__(self, exp: FaultCampaign, root: Path, progress: Callable[[str], None]) -> None:
        self.exp = exp
        self.root = root
        self.say = progress
        self.rng = random.Random(exp.seed)
        self.evidence = Evidence()
        self.jobs: list[Submitted] = []
        self.results = {k: KindResult(k) for k in ("baseline", *KINDS)}
        self.phase = "baseline"
        self.tokens: dict[str, str] = {}
        self.stop_load = asyncio.Event()
        self.postgres: PrivateServer | None = None
        self.server: ServeProcess
        self.outage: StoreOutage

    # ------------------------------------------------------------------ set-up

    def catalog(self) -> Path:
        path = self.root / "pools.toml"
        path.write_text(
            # network host: the campaign's jobs report to it over the host's loopback
            f'[[pools]]\nname = "{POOL}"\nnetwork = "host"\nmin_count = 2\nmax_idle_count = 4\n'
            f"max_count = {self.exp.pool_max}\nidle_timeout = {self.exp.idle_timeout_s}\n"
            f"step = 4\nmemory_mib_per_pod = 512\n"
        )
        return path

    def client(self, caller: str, timeout: float = 30.0) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.server.url,
            headers={"Authorization": f"Bearer {self.tokens[caller]}"},
            timeout=timeout,
        )

    # ------------------------------------------------------------------ jobs

    async def submit(
        self, http: httpx.AsyncClient, caller: str, first_s: float, later_s: float, tag: str
    ) -> Submitted | None:
        """Submit until the API answers with an id (the same request id each time, so a
        submission retried across a kill is one job)."""
        request_id = f"{caller}-{len(self.jobs)}-{self.rng.getrandbits(48):x}"
        body = {
            "pool": POOL,
            "command": [sys.executable, "-c", JOB_BODY, self.evidence.url, f"{first_s:.3f}",
                        f"{later_s:.3f}"],
            "lease_tag": tag,
            "request_id": request_id,
            "max_retries": self.exp.max_retries,
        }  # fmt: skip
        kind = self.phase
        submitted = time.time()
        while True:
            try:
                r = await http.post("/v1/jobs", json=body)
                if r.status_code in (200, 201):
                    job = Submitted(r.json()["id"], kind, caller, submitted, later_s)
                    if first_s == later_s:
                        job.work_s = first_s
                    self.jobs.append(job)
                    return job
                if r.status_code < 500 and r.status_code != 429:
                    self.say(f"submission refused: {r.status_code} {r.text[:200]}")
                    return None
            except httpx.TransportError:
                pass
            if self.stop_load.is_set() and time.time() - submitted > 60:
                return None
            await asyncio.sleep(0.2)

    async def wait_terminal(self, http: httpx.AsyncClient, job_id: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                r = await http.get(f"/v1/jobs/{job_id}", params={"wait_s": 20})
                if r.status_code == 200 and r.json()["state"] in TERMINAL:
                    return r.json()
            except httpx.TransportError:
                await asyncio.sleep(0.2)
            else:
                if r.status_code != 200:
                    await asyncio.sleep(0.2)
        return None

    async def stream(self) -> None:
        """Short jobs at a steady rate, not waited on."""
        async with self.client("local") as http:
            pending: set[asyncio.Task[Any]] = set()
            for i in range(self.exp.jobs):
                if self.stop_load.is_set():
                    break
                work = self.rng.uniform(*self.exp.stream_work_s)
                task = asyncio.create_task(self.submit(http, "local", work, work, f"s{i % 3}"))
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(self.exp.stream_interval_s)
            await asyncio.gather(*pending)

    async def loop(self, caller: str, build: Builder) -> None:
        """A demo loop, again and again: each call waits for its job, as a program does."""
        rng = random.Random(f"{self.exp.seed}/{caller}")
        scale = self.exp.loop_scale
        async with self.client(caller, timeout=60) as http:
            while not self.stop_load.is_set():
                program = build(Tagger("on", POOL), rng, caller)
                command = next(program, None)
                while command is not None and not self.stop_load.is_set():
                    if isinstance(command, Sleep):
                        await asyncio.sleep(command.seconds * scale)
                    elif isinstance(command, Run):
                        subs = await asyncio.gather(
                            *(self.submit(http, caller, r.duration * scale, r.duration * scale,
                                          r.tag) for r in command.jobs)
                        )  # fmt: skip
                        await asyncio.gather(
                            *(self.wait_terminal(http, s.id, self.exp.drain_s) for s in subs if s)
                        )
                    try:
                        command = program.send(None)
                    except StopIteration:
                        command = None

    # ------------------------------------------------------------------ faults

    async def holds(self) -> dict[str, tuple[str, float]]:
        """Every caller's held pods: name -> (owner, hold_until)."""
        out: dict[str, tuple[str, float]] = {}
        for caller in self.tokens:
            async with self.client(caller, timeout=10) as http:
                for pod in (await http.get("/v1/pods")).json()["pods"]:
                    if pod["state"] == "held" and pod["hold_until"]:
                        out[pod["name"]] = (caller, float(pod["hold_until"]))
        return out

    async def claimed_since(self, owner: str, pods: set[str], since: float) -> set[str]:
        """Those of `pods` that a job of `owner` was assigned to at or after `since`: the
        owner's next step claimed the hold, and its pod may since have ended by the session
        rule (a stream job of a new reuse tag runs once on it, then the pod retires)."""
        claimed: set[str] = set()
        after: str | None = None
        async with self.client(owner, timeout=10) as http:
            while True:
                params: dict[str, Any] = {"pool": POOL, "limit": 1000}
                if after is not None:
                    params["after"] = after
                page = (await http.get("/v1/jobs", params=params)).json()
                for job in page["jobs"]:
                    assigned = job["timings"].get("assigned")
                    if assigned is not None and assigned >= since:
                        claimed |= {p["name"] for p in job["pods"]} & pods
                after = page.get("next")
                if after is None:
                    return claimed

    async def kept(
        self,
        before: dict[str, tuple[str, float]],
        listed_at: float,
        lost_busy: dict[str, str],
        result: KindResult,
    ) -> int:
        """Holds of `before` present with the same expiry, or claimed by their owner since
        they were listed (`listed_at`, just before the kill). `lost_busy` (pod -> caller) names
        the pods the restarted broker found busy with an attempt it could not confirm: a hold
        its owner's job claimed between the listing and the kill, whose attempt was lost in
        the kill (retried elsewhere) and whose pod is deleted, was used by its owner."""
        kept = 0
        by_owner: dict[str, dict[str, Any]] = {}
        for caller in {owner for owner, _ in before.values()}:
            async with self.client(caller, timeout=10) as http:
                pods = (await http.get("/v1/pods")).json()["pods"]
            by_owner[caller] = {p["name"]: p for p in pods}
        checked = time.time()
        retiring: list[str] = []
        moved_on: dict[str, set[str]] = {}  # owner -> held pods no longer held nor busy
        for name, (owner, _) in before.items():
            pod = by_owner[owner].get(name)
            if pod is None or pod["state"] not in ("assigned", "running", "held"):
                moved_on.setdefault(owner, set()).add(name)
        claimed = {
            name for owner, names in moved_on.items()
            for name in await self.claimed_since(owner, names, listed_at)
        }  # fmt: skip
        claimed |= {
            name for owner, names in moved_on.items() for name in names
            if lost_busy.get(name) == owner
        }  # fmt: skip
        if claimed:
            self.say(f"  {len(claimed)} of {len(before)} holds claimed by their owners since")
        for name, (owner, until) in before.items():
            pod = by_owner[owner].get(name)
            if name in claimed:
                kept += 1
                continue
            if until <= checked:  # it expired on its own while the broker restarted
                result.holds_before -= 1
                continue
            if pod is not None and pod["owner"] == owner and pod["state"] == "retiring":
                retiring.append(name)
                continue
            # Kept: held with its expiry, or claimed by its owner since (assigned, running,
            # or held again with a later expiry after the owner's next job).
            if pod is not None and pod["owner"] == owner and (
                pod["state"] in ("assigned", "running")
                or (pod["state"] == "held" and float(pod["hold_until"] or 0) >= until)
            ):
                kept += 1
            else:
                state = "gone" if pod is None else f"{pod['state']} of {pod['owner']}"
                result.notes.append(f"hold of {owner} on {name} (until {until}) lost: {state}")
        if retiring:
            # A hold the restarted broker retired is kept only if its scaler broke it by the
            # paper's rule (a queued job blocked at the ceiling, the pod past its tenure):
            # the new process's own count of such breaks says so.
            await asyncio.sleep(3.0)
            async with self.client("local", timeout=10) as http:
                metrics = (await http.get("/metrics")).text
            broken = sum(
                float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                if line.startswith("firepool_pod_actions_total")
                and 'action="delete"' in line and 'reason="hold_broken"' in line
            )  # fmt: skip
            policy = min(int(broken), len(retiring))
            result.holds_broken += policy
            result.holds_before -= policy
            for name in retiring[policy:]:
                result.notes.append(f"hold on {name} retired after the restart")
        return kept

    async def broker_kill(self, result: KindResult) -> None:
        margin = 15.0  # holds expiring sooner might expire during the restart itself
        listed_at = time.time()
        try:
            before = {
                n: h for n, h in (await self.holds()).items() if h[1] > time.time() + margin
            }
        except (httpx.HTTPError, KeyError, ValueError):
            before = {}
        offset = self.server.log_offset()
        killed = time.monotonic()
        await asyncio.to_thread(self.server.kill)
        await asyncio.to_thread(self.server.start)
        result.kill_to_api_s.append(time.monotonic() - killed)
        ms = await asyncio.to_thread(self.server.dispatching_ms, offset)
        if ms is not None:
            result.restart_to_dispatch_ms.append(ms)
        else:
            result.notes.append("a restart logged no first dispatch")
        result.holds_before += len(before)
        lost_busy = await asyncio.to_thread(lost_in_restart, self.server.log, offset)
        result.holds_kept += await self.kept(before, listed_at, lost_busy, result)

    async def store_outage(self, result: KindResult) -> None:
        await asyncio.to_thread(self.outage, self.exp.outage_s)

    async def agent_fault(self, result: KindResult, partition: bool) -> None:
        """A job of its own; once its first attempt works, its agent is stopped or killed."""
        async with self.client("local") as http:
            victim = await self.submit(http, "local", self.exp.victim_first_s, 0.5, "victim")
            if victim is None:
                result.notes.append("a victim job was refused")
                return
            deadline = time.monotonic() + 300
            attempt = f"{victim.id}:0"
            while self.evidence.starts[attempt] == 0:
                state = (await http.get(f"/v1/jobs/{victim.id}")).json().get("state")
                if time.monotonic() > deadline or state in TERMINAL:
                    result.notes.append(f"victim {victim.id} never started")
                    return
                await asyncio.sleep(0.2)
            pod = (await http.get(f"/v1/jobs/{victim.id}")).json()["pods"][0]["name"]
            pid = agent_pid(self.root / "data", pod)
            if pid is None:
                result.notes.append(f"no agent pid for pod {pod}")
                return
            os.kill(pid, signal.SIGSTOP if partition else signal.SIGKILL)
            if not partition:
                return
            try:  # resumed once the broker has moved the job on (or given up on it)
                while time.monotonic() < deadline:
                    r = await http.get(f"/v1/jobs/{victim.id}")
                    if r.status_code == 200 and (
                        r.json()["attempt"] != attempt or r.json()["state"] in TERMINAL
                    ):
                        break
                    await asyncio.sleep(0.2)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    async def phase_run(self, kind: str, count: int) -> None:
        self.phase = kind
        result = self.results[kind]
        self.say(f"phase {kind}: {count} faults")
        if kind in ("partition", "agent"):
            # Concurrent, staggered: each waits out the broker's lost window on its own.
            tasks = []
            for _ in range(count):
                tasks.append(asyncio.create_task(self.agent_fault(result, kind == "partition")))
                result.faults += 1
                await asyncio.sleep(self.rng.uniform(*self.exp.gap_s))
            await asyncio.gather(*tasks)
            return
        for i in range(count):
            await asyncio.sleep(self.rng.uniform(*self.exp.gap_s))
            if kind == "broker":
                await self.broker_kill(result)
            else:
                await self.store_outage(result)
            result.faults += 1
            self.say(f"  {kind} fault {i + 1}/{count}")

    # ------------------------------------------------------------------ the run

    async def run(self) -> dict[str, KindResult]:
        exp = self.exp
        self.say(f"data in {self.root}")
        self.root.chmod(0o755)  # jobs run as their own uid: their pod directories lie below
        data = self.root / "data"
        data.mkdir(parents=True, exist_ok=True)
        if exp.store == "postgresql":
            try:
                self.postgres = start_private("postgresql")
            except ServerError as err:
                raise ConfigError(f"no private PostgreSQL server: {err}", field="store") from err
        try:
            store_url = self.postgres.create_database() if self.postgres is not None else None
            self.server = ServeProcess(data, self.catalog(), store_url, exp.isolation)
            self.outage = StoreOutage(data, self.postgres)
            await asyncio.to_thread(self.server.start)
            self.tokens["local"] = (data / "token").read_text().strip()
            callers = ("agent-0", "agent-1", "trainer")
            for caller in callers:
                self.tokens[caller] = await asyncio.to_thread(
                    self.server.cli, "token", "create", caller
                )
            load = [
                asyncio.create_task(self.stream()),
                asyncio.create_task(self.loop("agent-0", w_agent)),
                asyncio.create_task(self.loop("agent-1", w_agent)),
                asyncio.create_task(self.loop("trainer", w_rl)),
            ]
            await asyncio.sleep(exp.baseline_s)
            for kind, count in (("broker", exp.kills), ("store", exp.store_restarts),
                                ("partition", exp.partitions), ("agent", exp.agent_kills)):
                if count:
                    await self.phase_run(kind, count)
            self.stop_load.set()  # jobs submitted from here on count with the last phase
            # The loops end after their current step; one waiting on a job the broker never
            # ends is stopped here (that job is judged below like every other).
            _, late = await asyncio.wait(load, timeout=self.exp.drain_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*load, return_exceptions=True)
            await self.judge()
        finally:
            try:
                await asyncio.to_thread(self.server.stop)
            finally:
                self.evidence.close()
                if self.postgres is not None:
                    self.postgres.close()
        return self.results

    async def judge(self) -> None:
        deadline = time.monotonic() + self.exp.drain_s
        clients = {c: self.client(c) for c in self.tokens}
        try:
            for job in self.jobs:
                http = clients[job.caller]
                left = max(deadline - time.monotonic(), 1.0)
                final = await self.wait_terminal(http, job.id, left)
                self._count(job, final, await self._log(http, final))
        finally:
            for c in clients.values():
                await c.aclose()

    async def _log(self, http: httpx.AsyncClient, final: Any) -> str:
        if final is None:
            return ""
        for _ in range(20):
            try:
                r = await http.get(f"/v1/jobs/{final['id']}/logs")
                if r.status_code == 200:
                    return str(r.json()["data"])
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.5)
        return ""

    def _count(self, job: Submitted, final: Any, log: str) -> None:
        result = self.results[job.kind]
        result.jobs += 1
        if self.evidence.ran_twice(job.id):
            result.run_twice += 1
            starts, ends = self.evidence.of_job(job.id)
            result.notes.append(f"job {job.id} ran twice: starts {starts}, ends {ends}")
        if final is None or final["state"] != "SUCCEEDED":
            result.lost += 1
            state = "never ended" if final is None else final["state"]
            result.notes.append(f"job {job.id} {state}")
            return
        if expected_output(final["attempt"]) not in log:
            result.output_incomplete += 1
            result.lost += 1
            result.notes.append(f"job {job.id}: output incomplete")
            return
        result.succeeded += 1
        if final["retries"]:
            result.retried += 1
        t = final["timings"]
        if t.get("finished"):
            delay = t["finished"] - job.submitted - job.work_s
            result.longest_delay_s = max(result.longest_delay_s, delay)


# ---------------------------------------------------------------------- report


def summary(results: dict[str, KindResult], exp: FaultCampaign, wall_s: float) -> dict[str, Any]:
    """The flat object `--json` writes: totals first, then each kind's figures."""
    rows = list(results.values())
    holds_before = sum(r.holds_before for r in rows)
    dispatch = [ms for r in rows for ms in r.restart_to_dispatch_ms]
    api = [s for r in rows for s in r.kill_to_api_s]
    out: dict[str, Any] = {
        "store": exp.store,
        "jobs": sum(r.jobs for r in rows),
        "succeeded": sum(r.succeeded for r in rows),
        "lost": sum(r.lost for r in rows),
        "run_twice": sum(r.run_twice for r in rows),
        "output_incomplete": sum(r.output_incomplete for r in rows),
        "retried": sum(r.retried for r in rows),
        "holds_before": holds_before,
        "holds_kept": sum(r.holds_kept for r in rows),
        "holds_broken_by_policy": sum(r.holds_broken for r in rows),
        "holds_restored_pct": (
            100.0 * sum(r.holds_kept for r in rows) / holds_before if holds_before else None
        ),
        "restart_to_dispatch_ms_p50": statistics.median(dispatch) if dispatch else None,
        "restart_to_dispatch_ms_p90": _p90(dispatch),
        "kill_to_api_s_p50": statistics.median(api) if api else None,
        "kills": exp.kills,
        "store_restarts": exp.store_restarts,
        "partitions": exp.partitions,
        "agent_kills": exp.agent_kills,
        "wall_s": round(wall_s, 1),
    }
    for r in rows:
        for key, value in asdict(r).items():
            if key in ("kind", "notes", "restart_to_dispatch_ms", "kill_to_api_s"):
                continue
            out[f"{r.kind}_{key}"] = value
        out[f"{r.kind}_notes"] = r.notes[:20]
    return out


def _p90(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def markdown(results: dict[str, KindResult], exp: FaultCampaign, wall_s: float) -> str:
    head = ("| fault | faults | jobs | succeeded | lost | run twice | output incomplete | "
            "retried | holds kept | restart to dispatch p50 (ms) | kill to API p50 (s) | "
            "longest job delay (s) |")  # fmt: skip
    lines = [
        f"Fault campaign on {exp.store}: {exp.kills} broker kills, {exp.store_restarts} store "
        f"restarts, {exp.partitions} agent partitions, {exp.agent_kills} agent kills; "
        f"{wall_s:.0f} s.",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    for r in results.values():
        holds = f"{r.holds_kept}/{r.holds_before}" if r.holds_before else "-"
        dispatch = (
            f"{statistics.median(r.restart_to_dispatch_ms):.1f}" if r.restart_to_dispatch_ms
            else "-"
        )  # fmt: skip
        api = f"{statistics.median(r.kill_to_api_s):.1f}" if r.kill_to_api_s else "-"
        lines.append(
            f"| {r.kind} | {r.faults} | {r.jobs} | {r.succeeded} | {r.lost} | {r.run_twice} | "
            f"{r.output_incomplete} | {r.retried} | {holds} | {dispatch} | {api} | "
            f"{r.longest_delay_s:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(exp: FaultCampaign, out_dir: Path, json_path: Path | None = None) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="firepool-faults-") as tmp:
        campaign = Campaign(exp, Path(tmp), lambda line: print(line, file=sys.stderr))
        results = asyncio.run(campaign.run())
    wall = time.monotonic() - started
    flat = summary(results, exp, wall)
    table = markdown(results, exp, wall)
    (out_dir / "faults.md").write_text(table)
    (out_dir / "faults.json").write_text(json.dumps(flat, indent=2))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(flat, indent=2))
    print(table)
    return flat

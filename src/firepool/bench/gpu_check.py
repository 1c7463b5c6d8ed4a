"""`python -m firepool.bench gpu-check`: the GPU claims of the local backend, checked on the
machine's real card, in one run that fits a lent device's few minutes (`tools/gpu_check.sh`).

What a fake card cannot show, a lent H200 can: that NVML finds the card and how; that a
zero-VRAM standby beside an active job on one card really holds no CUDA context and no device
memory until it is promoted, and does after (NVML's per-process compute list, cross-checked
against each pod process's open /dev/nvidia* files and mapped libcuda); that a promoted job's
CUDA sees the pod's card and the memory limit the agent set; and what promotion -> first
instruction takes (`bench standby` on the card; the paper: 0.81 s on H200). Without a card the
same run uses a fake one (`--fake`, or automatically, `"mode": "fake"` in the JSON): every step
that means something on a fake card runs, and the others are reported
`"skipped": "no GPU (fake mode)"`, never as passed.

Steps (each records its checks, figures and duration; the run exits 1 if one that ran failed):
- `discovery`: `backends/gpus.py`'s discovery of the real card: model, memory, UUID, and how.
- `standby_placement`: an active pod and a standby on one card; a job holds the active pod,
  another caller's job claims the standby and runs only once the first job's processes are gone.
- `memory_limit_env`: both jobs see the card by UUID, `CUDA_DEVICE_MEMORY_LIMIT_0` set to the
  card's whole memory and a per-attempt `CUDA_DEVICE_MEMORY_SHARED_CACHE` (paper A.4).
- `standby_zero_vram` (real card): NVML lists the holder's process and none of the standby's
  while it waits, idle or claimed; after promotion it lists the standby's job, and no longer
  the holder's.
- `cuda_job_under_limit` (real card): the promoted job takes a CUDA context (PyTorch, else the
  driver through ctypes), allocates, sees the pod's card, and has an allocation past the limit
  refused; whether an interception library (HAMi-core) or only the card's size enforces it is
  reported, not assumed.
- `promotion`: `bench standby` on the card, promotion -> first instruction against an
  expectation (`--expect-promotion-below`).

Only the standard library is imported at the top: a machine without firepool's dependencies
still gets a JSON saying which step failed on which import.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

STEPS = (
    "discovery",
    "standby_placement",
    "memory_limit_env",
    "standby_zero_vram",
    "cuda_job_under_limit",
    "promotion",
)
#: Steps that mean nothing without a real card.
NEEDS_CARD = frozenset({"discovery", "standby_zero_vram", "cuda_job_under_limit"})
#: Steps whose figures come from the one standby session.
SESSION_STEPS = frozenset(
    {"standby_placement", "memory_limit_env", "standby_zero_vram", "cuda_job_under_limit"}
)
FAKE_SKIP = "no GPU (fake mode)"
NOT_SELECTED = "not selected (--steps)"
PAPER_PROMOTION_S = 0.81
#: The most the standby session may take (two jobs; PyTorch's import and CUDA's start in each).
SESSION_S = 240.0
FAKE_UUID = "GPU-fake-check-0"
FAKE_MEMORY_MIB = 16 * 1024  # model.ACCELERATORS["fake"] GiB, as the local backend gives it


@dataclass
class Step:
    """One step's outcome: passed only if at least one check ran and every check held."""

    name: str
    status: str = "failed"  # passed | failed | skipped
    skipped: str | None = None
    duration_s: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def check(self, name: str, ok: bool) -> bool:
        self.checks[name] = bool(ok)
        return bool(ok)

    def settle(self) -> None:
        if self.skipped is not None:
            self.status = "skipped"
        elif self.error is None and self.checks and all(self.checks.values()):
            self.status = "passed"
        else:
            self.status = "failed"
            if self.error is None and not self.checks:
                self.error = "no check ran"

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "passed": self.status == "passed",
            "skipped": self.skipped,
            "duration_s": round(self.duration_s, 3),
            "checks": self.checks,
            "figures": self.figures,
            "error": self.error,
        }


@dataclass(frozen=True)
class Card:
    """The card the check runs on."""

    uuid: str
    model: str  # the pool's accelerator: a model.ACCELERATORS key
    name: str
    memory_mib: int
    how: str  # "fake", "nvml" or "nvidia-smi"

    @property
    def fake(self) -> bool:
        return self.how == "fake"


FAKE_CARD = Card(FAKE_UUID, "fake", "", FAKE_MEMORY_MIB, "fake")


def choose_mode(requested: str, devices: list[Any], how: str) -> tuple[str, str]:
    """("real" | "fake", why) from `--fake`/`--real`/auto and what discovery found."""
    if requested == "fake":
        return "fake", "--fake given"
    if devices:
        return "real", f"{len(devices)} NVIDIA card(s) found via {how}"
    if requested == "real":
        raise ValueError("--real: no NVIDIA device found (neither pynvml nor nvidia-smi saw one)")
    return "fake", "no NVIDIA device found (neither pynvml nor nvidia-smi saw one)"


# --------------------------------------------------------------------------- the jobs' mailbox


class Mailbox:
    """A loopback HTTP server the check's jobs talk to (their pool is on the host's network):
    `GET /gate/NAME` answers `wait` until the check opens that gate, then `go`; `POST
    /report/NAME` stores a job's report. A job sees no host files, so this is how it tells the
    check what it saw and how the check holds it running for exactly as long as it needs."""

    def __init__(self) -> None:
        self.gates: set[str] = set()
        self.reports: dict[str, dict[str, Any]] = {}
        lock = self.lock = threading.Lock()
        box = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                name = self.path.removeprefix("/gate/")
                with lock:
                    body = b"go" if name in box.gates else b"wait"
                self._answer(body)

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(size) or b"{}")
                with lock:
                    box.reports[self.path.removeprefix("/report/")] = body
                self._answer(b"ok")

            def _answer(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def open(self, name: str) -> None:
        with self.lock:
            self.gates.add(name)

    def report(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.reports.get(name)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------- processes


def pod_processes(agent_pid: int) -> set[int]:
    """A local pod's processes: its agent and everything below it (its jobs too, whatever PID
    namespace they run in: /proc here shows them by this namespace's numbers)."""
    from firepool.agent import procfs

    return {agent_pid} | procfs.descendants(procfs.snapshot(), [agent_pid])


def device_handles(pid: int) -> dict[str, Any]:
    """What ties a process to the GPU driver without asking the driver: open /dev/nvidia*
    files and a mapped libcuda. A process with a CUDA context has both; one that never touched
    CUDA has neither. `readable` is False when /proc would not say (then nothing is proven)."""
    files: set[str] = set()
    readable = True
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/nvidia"):
                    files.add(target)
    except OSError:
        readable = False
    libcuda = False
    try:
        with open(f"/proc/{pid}/maps") as fh:
            libcuda = any("libcuda.so" in line for line in fh)
    except OSError:
        readable = False
    return {"device_files": sorted(files), "libcuda": libcuda, "readable": readable}


@dataclass
class Observation:
    """NVML's compute list and the pods' processes at one moment of the session."""

    at: str
    how: str
    apps: list[dict[str, Any]] | None  # on the check's card; None: NVML could not be read
    pods: dict[str, dict[str, Any]]  # role -> {"pids": [...], "handles": {pid: ...}}

    def holding(self, role: str) -> list[dict[str, Any]]:
        """The role's processes that NVML lists on the card."""
        pids = set(self.pods[role]["pids"])
        return [a for a in self.apps or [] if a["pid"] in pids]

    def touches_driver(self, role: str) -> list[int]:
        """The role's processes with a /dev/nvidia* file open or libcuda mapped."""
        handles = self.pods[role]["handles"]
        return sorted(int(pid) for pid, h in handles.items() if h["device_files"] or h["libcuda"])

    def unreadable(self, role: str) -> list[int]:
        return sorted(int(p) for p, h in self.pods[role]["handles"].items() if not h["readable"])


def observe(at: str, card: Card, agents: dict[str, int], fake: bool) -> Observation:
    pods: dict[str, dict[str, Any]] = {}
    for role, agent_pid in agents.items():
        pids = sorted(pod_processes(agent_pid))
        handles = {} if fake else {str(p): device_handles(p) for p in pids}
        pods[role] = {"agent_pid": agent_pid, "pids": pids, "handles": handles}
    if fake:
        return Observation(at, "fake", [], pods)
    from firepool.backends.gpus import compute_processes

    found, how = compute_processes()
    apps = None
    if found is not None:
        apps = [{"pid": p.pid, "used_mib": p.used_mib} for p in found if p.uuid == card.uuid]
    return Observation(at, how, apps, pods)


# --------------------------------------------------------------------------- the session


@dataclass
class Session:
    """One broker, one card, an active pod and a standby: a holder job on the active pod, then
    another caller's job promoted onto the standby. The evidence several steps judge."""

    card: Card
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> record facts
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)  # holder / next
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    observations: dict[str, Observation] = field(default_factory=dict)
    duration_s: float = 0.0
    error: str | None = None


def _wait(what: str, check: Callable[[], bool], deadline: float) -> None:
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within the check's time budget")
        time.sleep(0.02)


def run_session(card: Card, cuda: str, alloc_mib: int, deadline: float) -> Session:
    """The standby handover on `card`, observed at three moments: the holder running with the
    standby idle beside it, the standby claimed by the next job (still waiting for the card),
    and the next job running on the promoted standby."""
    from firepool.model import NetworkAccess, PodRole, PodState, PoolSpec
    from firepool.service.broker import BrokerConfig
    from firepool.service.catalog import Catalog
    from firepool.testing import gpu_probe
    from firepool.testing.service import running_broker, submit, wait_job

    session = Session(card)
    began = time.monotonic()
    # network host: the jobs reach the mailbox on the host's loopback. No host memory cap:
    # where no cgroup can be had the agent falls back to RLIMIT_AS, which a CUDA context's
    # address-space reservations exceed.
    pool = PoolSpec(
        name="gpu",
        network=NetworkAccess.HOST,
        accelerator=card.model,
        accelerators_per_pod=1,
        min_count=1,
        max_idle_count=1,
        max_count=1,
        standbys_per_active=1,
        caller_hold_seconds=0.0,
        idle_timeout=600.0,
        memory_mib_per_pod=0,
        step=1,
    )
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)
    box = Mailbox()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="firepool-gpu-check-") as tmp,
            running_broker(
                Path(tmp),
                catalog=Catalog((pool,), {card.model: 1}),
                config=config,
                fake_devices=[card.uuid] if card.fake else None,
            ) as broker,
        ):
            tracker = broker.embedded.broker.tracker

            def pods() -> list[tuple[str, PodRole, PodState]]:
                return broker.call(
                    lambda: [(p.name, p.role, p.state) for p in tracker.pool_pods("gpu")]
                )

            def staged() -> bool:
                seen = pods()
                return len(seen) == 2 and all(s is PodState.IDLE for _n, _r, s in seen)

            _wait("an active pod and a standby idle on the card", staged, deadline)
            records = {r.name: r for r in broker.run(broker.embedded.backend.list_pods())}
            role_of = {n: r.value for n, r, _s in pods()}
            for name, role in role_of.items():
                rec = records[name]
                session.pods[role] = {
                    "name": name,
                    "devices": list(rec.devices),
                    "agent_pid": rec.pid,
                    "isolation": rec.isolation,
                }
            agents = {role: p["agent_pid"] for role, p in session.pods.items()}
            alice, bob = broker.client("alice"), broker.client("bob")
            job_args = ["--cuda", cuda, "--alloc-mib", str(alloc_mib)]

            def reported_or_over(name: str, job: str, client: Any) -> Callable[[], bool]:
                def check() -> bool:
                    if box.report(name) is not None:
                        return True
                    state = client.get(f"/v1/jobs/{job}").json()["state"]
                    return state in ("SUCCEEDED", "FAILED", "CANCELLED")

                return check

            holder = submit(
                alice,
                pool="gpu",
                command=gpu_probe.command(
                    sys.executable,
                    *job_args,
                    "--report",
                    box.url("report/holder"),
                    "--wait",
                    box.url("gate/holder"),
                ),
            )
            _wait("the holder's report", reported_or_over("holder", holder, alice), deadline)
            session.observations["holding"] = observe("holding", card, agents, card.fake)
            nxt = submit(
                bob,
                pool="gpu",
                command=gpu_probe.command(
                    sys.executable,
                    *job_args,
                    "--try-over-limit",
                    "--report",
                    box.url("report/next"),
                    "--wait",
                    box.url("gate/next"),
                ),
            )

            def claimed() -> bool:
                return any(r is PodRole.STANDBY and s is PodState.ASSIGNED for _n, r, s in pods())

            _wait("the standby claimed by the next job", claimed, deadline)
            session.observations["claimed"] = observe("claimed", card, agents, card.fake)
            box.open("holder")
            session.jobs["holder"] = wait_job(alice, holder, timeout=deadline - time.monotonic())
            _wait("the next job's report", reported_or_over("next", nxt, bob), deadline)
            session.observations["promoted"] = observe("promoted", card, agents, card.fake)
            box.open("next")
            session.jobs["next"] = wait_job(bob, nxt, timeout=deadline - time.monotonic())
            for name in ("holder", "next"):
                session.reports[name] = box.report(name) or {}
    except Exception as err:
        session.error = f"{type(err).__name__}: {err}"
    finally:
        box.close()
        session.duration_s = time.monotonic() - began
    return session


# --------------------------------------------------------------------------- the steps


def step_discovery(step: Step, card: Card, found: tuple[list[Any], str]) -> None:
    devices, how = found
    step.figures.update(
        how=how,
        devices=[asdict(d) for d in devices],
        pynvml=importlib.util.find_spec("pynvml") is not None,
        nvidia_smi=shutil.which("nvidia-smi"),
    )
    if step.skipped is not None:
        return
    from firepool.model import ACCELERATORS

    if not step.check("found", bool(devices)):
        return
    first = devices[0]
    step.check("model_known", first.model in ACCELERATORS)
    step.check("memory_reported", first.memory_mib > 0)
    step.check("uuid_form", first.uuid.startswith("GPU-"))
    if how == "nvml" and shutil.which("nvidia-smi"):
        from firepool.backends.gpus import nvidia_smi_devices

        smi = {d.uuid for d in nvidia_smi_devices()}
        step.figures["nvidia_smi_uuids"] = sorted(smi)
        step.check("nvml_matches_nvidia_smi", smi == {d.uuid for d in devices})
    step.figures["card"] = asdict(card)


def _session_failed(step: Step, session: Session) -> bool:
    if session.error is not None:
        step.error = f"standby session: {session.error}"
        return True
    return False


def step_placement(step: Step, s: Session) -> None:
    step.figures.update(pods=s.pods, session_s=round(s.duration_s, 3))
    if _session_failed(step, s):
        return
    holder, nxt = s.jobs["holder"], s.jobs["next"]
    active, standby = s.pods["active"], s.pods["standby"]
    step.figures.update(
        holder={k: holder.get(k) for k in ("state", "pods", "timings", "exit_code")},
        next={k: nxt.get(k) for k in ("state", "pods", "timings", "exit_code")},
    )
    step.check("one_card", active["devices"] == standby["devices"] == [s.card.uuid])
    step.check("holder_on_active", holder["pods"][0]["name"] == active["name"])
    step.check(
        "next_promoted_standby",
        nxt["pods"][0]["name"] == standby["name"] and nxt["pods"][0]["acquisition"] == "standby",
    )
    step.check("both_succeeded", holder["state"] == nxt["state"] == "SUCCEEDED")
    # Invariant 6: the standby runs only once the previous job's processes are gone.
    finished, started = holder["timings"].get("finished"), nxt["timings"].get("started")
    step.check(
        "next_started_after_holder_ended", bool(finished and started and started >= finished)
    )
    first = nxt["timings"].get("first_instruction")
    if finished and first:
        step.figures["verdict_to_first_instruction_s"] = round(first - finished, 4)


def step_memory_env(step: Step, s: Session) -> None:
    if _session_failed(step, s):
        return
    envs = {name: s.reports[name].get("env", {}) for name in ("holder", "next")}
    step.figures.update(envs=envs, card_memory_mib=s.card.memory_mib, card_uuid=s.card.uuid)
    step.check(
        "card_by_uuid", all(e.get("CUDA_VISIBLE_DEVICES") == s.card.uuid for e in envs.values())
    )
    limits = {name: s.reports[name].get("limit_mib") for name in envs}
    step.figures["limit_mib"] = limits
    step.check("limit_is_whole_card", all(v == s.card.memory_mib for v in limits.values()))
    caches = [e.get("CUDA_DEVICE_MEMORY_SHARED_CACHE") for e in envs.values()]
    attempts = [s.reports[name].get("attempt") or "" for name in envs]
    step.check(
        "fresh_accounting_file_per_attempt",
        all(caches)
        and len(set(caches)) == 2
        and all(a.replace(":", "_") in str(c) for a, c in zip(attempts, caches, strict=True)),
    )


def step_zero_vram(step: Step, s: Session) -> None:
    if _session_failed(step, s):
        return
    obs = s.observations
    step.figures["observations"] = {k: asdict(o) for k, o in obs.items()}
    step.figures["how"] = obs["holding"].how
    step.check("nvml_read", all(o.apps is not None for o in obs.values()))
    holding = obs["holding"].holding("active")
    step.figures["holder_on_card"] = holding
    # The control: NVML does list this session's processes (it could not show the standby's
    # absence otherwise).
    step.check(
        "holder_listed_with_memory",
        any(a["used_mib"] is None or a["used_mib"] > 0 for a in holding),
    )
    for at in ("holding", "claimed"):
        o = obs[at]
        step.figures[f"standby_{at}"] = {
            "listed": o.holding("standby"),
            "touching_driver": o.touches_driver("standby"),
            "unreadable": o.unreadable("standby"),
        }
        step.check(
            f"standby_no_context_{at}",
            not o.holding("standby")
            and not o.touches_driver("standby")
            and not o.unreadable("standby"),
        )
    promoted = obs["promoted"]
    listed = promoted.holding("standby")
    step.figures["promoted_listed"] = listed
    step.check(
        "promoted_holds_context_and_memory",
        any(a["used_mib"] is None or a["used_mib"] > 0 for a in listed)
        and bool(promoted.touches_driver("standby")),
    )
    holder_pids = {a["pid"] for a in holding}
    still = [a for a in promoted.apps or [] if a["pid"] in holder_pids]
    step.figures["holder_still_listed_after_promotion"] = still
    step.check("holder_gone_before_promotion", not still)


def step_cuda_job(step: Step, s: Session, alloc_mib: int) -> None:
    if _session_failed(step, s):
        return
    rep = s.reports["next"]
    cuda = rep.get("cuda") or {}
    step.figures.update(
        cuda=cuda, limit_mib=rep.get("limit_mib"), interception=rep.get("interception")
    )
    if not step.check("cuda_context", bool(cuda.get("via")) and not cuda.get("error")):
        step.error = cuda.get("error")
        return
    step.check("device_is_pods_card", cuda.get("device_uuid") == s.card.uuid)
    step.check("allocated", cuda.get("allocated_mib") == alloc_mib)
    limit = rep.get("limit_mib")
    step.check("limit_covers_card", limit is not None and limit >= cuda.get("total_mib", 0))
    step.check("over_limit_refused", cuda.get("over_limit_refused") is True)
    step.figures["enforced_by"] = (
        f"interception library {rep['interception']}"
        if rep.get("interception")
        else "the card's size only: no interception library is loaded on the local backend, so "
        "CUDA_DEVICE_MEMORY_LIMIT_0 is set and reported but nothing enforces a limit below it"
    )


def step_promotion(
    step: Step, card: Card, found: tuple[list[Any], str], handovers: int, expect_below_s: float
) -> None:
    from firepool.bench import standby

    if card.fake:
        venue = standby.FAKE
    else:
        device = next(d for d in found[0] if d.uuid == card.uuid)
        venue = standby.Venue(card.model, device, card.how)
    result = standby.run(handovers, 1, venue)
    promo = float(result["standby_promotion_to_first_s_p50"])  # type: ignore[arg-type]
    handover = float(result["standby_handover_s_p50"])  # type: ignore[arg-type]
    step.figures.update(
        result, paper_promotion_s=PAPER_PROMOTION_S, expect_promotion_below_s=expect_below_s
    )
    step.check("every_next_job_on_the_standby", result["standby_path_share"] == 1.0)
    step.check("promotion_within_handover", 0 < promo <= handover)
    step.check("promotion_below_expectation", promo < expect_below_s)


# --------------------------------------------------------------------------- the run


@dataclass
class Run:
    mode: str
    reason: str
    json_path: Path
    selected: frozenset[str]
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def deadline(self) -> float:
        return self.started + self.budget_s

    def skip_reason(self, name: str) -> str | None:
        if name in NEEDS_CARD and self.mode == "fake":
            return FAKE_SKIP
        if name not in self.selected:
            return NOT_SELECTED
        return None

    def do(self, name: str, judge: Callable[[Step], None], *, when_skipped: bool = False) -> Step:
        """Run one step (or record why not); `when_skipped` still lets a skipped step gather
        its figures, never its checks."""
        st = Step(name, skipped=self.skip_reason(name))
        began = time.monotonic()
        try:
            if st.skipped is None and time.monotonic() > self.deadline:
                st.error = f"not run: the check's time budget ({self.budget_s:.0f} s) was spent"
            elif st.skipped is None or when_skipped:
                judge(st)
        except Exception as err:
            st.error = f"{type(err).__name__}: {err}"
            st.figures["traceback"] = traceback.format_exc(limit=8)
        finally:
            st.duration_s = time.monotonic() - began
            if st.skipped is not None:
                st.checks.clear()
            st.settle()
            self.steps.append(st)
            self.write(complete=False)
        return st

    def document(self, complete: bool) -> dict[str, Any]:
        counts = {
            k: sum(s.status == k for s in self.steps) for k in ("passed", "failed", "skipped")
        }
        return {
            "check": "gpu-check",
            "mode": self.mode,
            "mode_reason": self.reason,
            "complete": complete,
            "duration_s": round(time.monotonic() - self.started, 3),
            "budget_s": self.budget_s,
            **self.meta,
            "steps": [s.as_json() for s in self.steps],
            "summary": {**counts, "ok": counts["failed"] == 0},
        }

    def write(self, complete: bool) -> None:
        """After every step, so a run cut short still leaves what it found."""
        self.json_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.json_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.document(complete), indent=2, default=str) + "\n")
        tmp.replace(self.json_path)


def default_json(given: str | None) -> Path:
    """--json, else $OUT/gpu_check.json (the device tool brings $OUT back), else results/."""
    if given:
        return Path(given)
    out = os.environ.get("OUT")
    return Path(out) / "gpu_check.json" if out else Path("results") / "gpu_check.json"


def _summary_figure(step: Step) -> str:
    """One line for the printed table: why skipped, what failed, or the step's headline."""
    f = step.figures
    if step.status == "skipped":
        return step.skipped or ""
    failed = [k for k, ok in step.checks.items() if not ok]
    if step.error:
        return step.error[:70]
    if failed:
        return "failed: " + ", ".join(failed)
    for key, label in (
        ("standby_promotion_to_first_s_p50", "promotion -> first p50"),
        ("verdict_to_first_instruction_s", "verdict -> first instruction"),
    ):
        if key in f:
            return f"{label} {float(f[key]):.3f} s"
    if "card" in f:
        card = f["card"]
        return f"{card['name'] or card['model']} {card['memory_mib']} MiB via {f['how']}"
    return f"{len(step.checks)} checks held"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench gpu-check")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--fake",
        action="store_const",
        const="fake",
        dest="mode",
        help="a fake card even where a real one is present",
    )
    mode.add_argument(
        "--real",
        action="store_const",
        const="real",
        dest="mode",
        help="fail at once unless a real card is found",
    )
    parser.add_argument(
        "--json", dest="json_path", help="default: $OUT/gpu_check.json, else results/gpu_check.json"
    )
    parser.add_argument("--steps", help="comma-separated subset of: " + ", ".join(STEPS))
    parser.add_argument(
        "--handovers",
        type=int,
        default=None,
        help="bench standby handovers per arm (default 5 real, 1 fake)",
    )
    parser.add_argument(
        "--alloc-mib",
        type=int,
        default=1024,
        help="device memory each session job takes on a real card",
    )
    parser.add_argument(
        "--expect-promotion-below",
        type=float,
        default=2.0,
        metavar="S",
        help="promotion -> first instruction p50 must be below S seconds "
        "(the paper: 0.81 s on H200)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=450.0,
        help="steps not started by then fail as not run (a lent device's check has 8 minutes)",
    )
    args = parser.parse_args(argv)
    selected = frozenset(STEPS)
    if args.steps:
        asked = {s.strip() for s in args.steps.split(",") if s.strip()}
        unknown = sorted(asked - set(STEPS))
        if unknown:
            print(f"unknown steps {unknown}; choose from {', '.join(STEPS)}", file=sys.stderr)
            return 2
        selected = frozenset(asked)
    try:
        from firepool.backends.gpus import discover

        found: tuple[list[Any], str] = discover()
    except ImportError as err:  # firepool's dependencies missing: said in the JSON, not hidden
        found = ([], f"none (discovery failed: {err})")
    try:
        chosen, reason = choose_mode(args.mode or "auto", found[0], found[1])
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    run = Run(chosen, reason, default_json(args.json_path), selected, args.budget_s)
    run.meta.update(
        host=socket.gethostname(),
        python=sys.version.split()[0],
        executable=sys.executable,
        torch_importable=importlib.util.find_spec("torch") is not None,
        euid=os.geteuid(),
    )
    card = FAKE_CARD
    if chosen == "real":
        d = found[0][0]
        card = Card(d.uuid, d.model, d.name, d.memory_mib, found[1])
    run.meta["card"] = asdict(card)
    run.write(complete=False)

    run.do("discovery", lambda st: step_discovery(st, card, found), when_skipped=True)
    session: Session | None = None
    if any(run.skip_reason(n) is None for n in SESSION_STEPS) and time.monotonic() < run.deadline:
        # At most SESSION_S of the budget: a session stuck on one wait leaves the promotion
        # step its time.
        until = min(run.deadline, time.monotonic() + SESSION_S)
        session = run_session(card, "none" if card.fake else "torch", args.alloc_mib, until)
        run.meta["session"] = {"duration_s": round(session.duration_s, 3), "error": session.error}
    judges: dict[str, Callable[[Step, Session], None]] = {
        "standby_placement": step_placement,
        "memory_limit_env": step_memory_env,
        "standby_zero_vram": step_zero_vram,
        "cuda_job_under_limit": lambda st, s: step_cuda_job(st, s, args.alloc_mib),
    }
    for name, judge in judges.items():

        def evaluate(st: Step, judge: Callable[[Step, Session], None] = judge) -> None:
            if session is None:
                st.error = "not run: the check's time budget was spent before the session"
                return
            st.figures["session_s"] = round(session.duration_s, 3)
            judge(st, session)

        run.do(name, evaluate)
    handovers = args.handovers or (1 if card.fake else 5)
    run.do(
        "promotion",
        lambda st: step_promotion(st, card, found, handovers, args.expect_promotion_below),
    )
    run.write(complete=True)

    rows = [(s.name, s.status, _summary_figure(s)) for s in run.steps]
    title = f"GPU check, {chosen} mode ({reason}); JSON: {run.json_path}"
    try:
        from firepool.bench.common import print_table
    except ImportError:  # no rich: the JSON is written, the table comes out plain
        print(title, *("  ".join(r) for r in rows), sep="\n")
    else:
        print_table(title, rows)
    return 1 if any(s.status == "failed" for s in run.steps) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

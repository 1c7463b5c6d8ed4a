"""The broker end to end: real HTTP, a real store, real local pods, real processes."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from firepool.model import PodState, TokenRole
from firepool.protocol import ExitEvent
from firepool.testing.service import BrokerThread, run, settled, submit, wait_job

PY = sys.executable
POOLS = ("cpu", "hint", "short", "burst", "small")


def py(code: str) -> list[str]:
    return ["python", "-c", code]


def pod_of(job: dict) -> tuple[str, str, str]:  # type: ignore[type-arg]
    (pod,) = job["pods"]
    return pod["name"], pod["acquisition"], pod["reason"]


def tracked(broker: BrokerThread, name: str) -> bool:
    return broker.call(lambda: broker.embedded.broker.tracker.get(name) is not None)


def gone(broker: BrokerThread, name: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not tracked(broker, name):
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------------- on every store


def test_exit_codes_retries_and_attempt_ids_on_every_store(
    broker_on: BrokerThread, tmp_path: Path
) -> None:
    with broker_on.client() as c:
        ok = run(c, command=py("print('hi')"), lease_tag="s")
        assert (ok["state"], ok["exit_code"], ok["error_class"]) == ("SUCCEEDED", 0, None)
        assert c.get(f"/v1/jobs/{ok['id']}/logs").json()["data"] == "hi\n"
        bad = run(c, command=py("import sys; sys.exit(3)"), lease_tag="s")
        assert (bad["state"], bad["exit_code"], bad["error_class"]) == (
            "FAILED", 3, "NonZeroExit",
        )  # fmt: skip
        flaky = run(  # the attempt id tells the retry apart (a job leaves no host files)
            c,
            command=py("import os,sys; sys.exit(0 if os.environ['FIREPOOL_ATTEMPT']"
                       ".endswith(':1') else 1)"),
            max_retries=2,
            lease_tag="s",
        )
        assert (flaky["state"], flaky["retries"]) == ("SUCCEEDED", 1)
        attempts = broker_on.embedded.store.attempts(flaky["id"])
        assert [a.id for a in attempts] == [f"{flaky['id']}:0", f"{flaky['id']}:1"]
        for job in (ok, bad, flaky):
            assert pod_of(job)[1] in ("warm", "new")


# ---------------------------------------------------------------------- reuse rules


def test_owner_only_reuse(broker: BrokerThread) -> None:
    with broker.client("alice") as alice, broker.client("bob") as bob:
        first = run(alice, command=py("pass"), lease_tag="s")
        pod, _, _ = pod_of(first)
        # alice's pod is now the only idle pod of the pool, held for her.
        other = run(bob, command=py("pass"), lease_tag="s")
        assert pod_of(other)[0] != pod
        again = run(alice, command=py("pass"), lease_tag="s")
        assert pod_of(again) == (pod, "warm", "same_session")
        assert settled(broker, pod) == "held"  # the job's answer comes a reset earlier
        pods = {p["name"]: p for p in bob.get("/v1/pods").json()["pods"]}
        assert pods[pod]["owner"] is None  # bob does not learn who holds it
        mine = {p["name"]: p for p in alice.get("/v1/pods").json()["pods"]}
        assert mine[pod]["owner"] == "alice" and mine[pod]["state"] == "held"
    with broker.client("root", TokenRole.ADMIN) as admin:  # an admin sees every pod in full
        full = {p["name"]: p for p in admin.get("/v1/pods").json()["pods"]}
        assert (full[pod]["owner"], full[pod]["lease_tag"]) == ("alice", "s")


def test_new_tag_recycles_once_then_retires(broker: BrokerThread) -> None:
    with broker.client("alice") as c:
        pod, _, _ = pod_of(run(c, command=py("pass"), lease_tag="s1"))
        assert settled(broker, pod) == "held"  # else s2 takes a free pod, not one resetting
        assert pod_of(run(c, command=py("pass"), lease_tag="s2")) == (
            pod, "recycled", "new_session",
        )  # fmt: skip
        assert gone(broker, pod)
        assert pod_of(run(c, command=py("pass"), lease_tag="s2"))[0] != pod


def test_queue_switch_recycles_once_then_retires(broker: BrokerThread) -> None:
    with broker.client("alice") as c:
        pod, _, _ = pod_of(run(c, command=py("pass"), queue="a"))
        assert settled(broker, pod) == "held"
        assert pod_of(run(c, command=py("pass"), queue="b")) == (pod, "recycled", "queue_switch")
        assert gone(broker, pod)


def test_hold_expiry_retires_the_pod(broker: BrokerThread) -> None:
    with broker.client("alice") as c:
        pod, _, _ = pod_of(run(c, pool="short", command=py("pass"), lease_tag="s"))
        assert gone(broker, pod, timeout=5.0)  # held 1 s, then retired and deleted
        assert pod_of(run(c, pool="short", command=py("pass"), lease_tag="s"))[0] != pod


def test_tag_as_hint_keeps_the_pod(broker: BrokerThread) -> None:
    with broker.client("alice") as c:
        pod, _, _ = pod_of(run(c, pool="hint", command=py("pass"), lease_tag="s1"))
        assert settled(broker, pod) == "held"
        assert pod_of(run(c, pool="hint", command=py("pass"), lease_tag="s2")) == (
            pod, "warm", "tag_hint",
        )  # fmt: skip
        # Kept for its owner (held), not retiring as it would be across a tag boundary.
        assert settled(broker, pod) == "held"
        view = {p["name"]: p for p in c.get("/v1/pods").json()["pods"]}[pod]
        assert (view["owner"], view["lease_tag"], view["state"]) == ("alice", "s2", "held")


# ---------------------------------------------------------------------- failures


def test_unknown_field_is_refused_naming_it(broker: BrokerThread) -> None:
    with broker.client() as c:
        resp = c.post("/v1/jobs", json={"pool": "cpu", "command": ["true"], "lease_tg": "x"})
        assert resp.status_code == 422
        assert resp.json()["field"] == "lease_tg"
        assert c.get("/v1/jobs").json()["jobs"] == []


def test_oom_is_reported_as_oom(broker: BrokerThread) -> None:
    with broker.client() as c:
        job = run(c, pool="small", command=py("b = bytearray(400 * 1024 * 1024); print(len(b))"))
        assert (job["state"], job["error_class"]) == ("FAILED", "OOM")


def test_a_job_that_never_started_has_no_exit_code(broker: BrokerThread) -> None:
    with broker.client() as c:
        job = run(c, command=["/nonexistent/binary"])
        assert (job["state"], job["error_class"], job["exit_code"]) == (
            "FAILED", "LaunchFailed", None,
        )  # fmt: skip


def test_an_old_attempt_can_never_report_into_the_new_one(
    broker: BrokerThread, tmp_path: Path
) -> None:
    with broker.client() as c:
        job_id = submit(
            c,
            command=py(
                "import os,sys,time\n"
                "if os.environ['FIREPOOL_ATTEMPT'].endswith(':1'): time.sleep(2); sys.exit(0)\n"
                "sys.exit(1)"
            ),
            max_retries=1,
        )
        deadline = time.monotonic() + 30
        while True:  # the retry's start committed (the broker tracks it from its claim on)
            job = c.get(f"/v1/jobs/{job_id}").json()
            if job["retries"] >= 1 and job["state"] == "RUNNING" and job["pods"]:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert broker.call(lambda: job_id in broker.embedded.broker.running)
        pod = job["pods"][0]["name"]
        secret = broker.call(lambda: broker.embedded.broker.pods.records[pod].secret)
        stale = ExitEvent(
            pod=pod, attempt=f"{job_id}:0", exit_code=7, runtime_s=0.1, started_at=0.0,
            finished_at=0.1,
        )  # fmt: skip
        resp = httpx.post(
            f"{broker.url}/internal/v1/events",
            content=stale.model_dump_json(),
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        )
        assert resp.json() == {"accepted": False}
        forged = httpx.post(
            f"{broker.url}/internal/v1/events",
            content=stale.model_dump_json(),
            headers={"Authorization": "Bearer not-the-secret", "Content-Type": "application/json"},
        )
        assert forged.status_code == 401
        final = wait_job(c, job_id)
        assert (final["state"], final["exit_code"], final["retries"]) == ("SUCCEEDED", 0, 1)


def test_cancel_queued_and_running(broker: BrokerThread) -> None:
    with broker.client() as c:
        running = submit(c, command=py("import time; time.sleep(30)"))
        deadline = time.monotonic() + 20
        while c.get(f"/v1/jobs/{running}").json()["state"] != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert c.post(f"/v1/jobs/{running}/cancel").status_code == 202  # accepted: stopping
        job = wait_job(c, running, timeout=30)
        assert (job["state"], job["error_class"]) == ("CANCELLED", "Cancelled")
        # "small" holds one pod: a second job behind a long one stays queued.
        blocker = submit(c, pool="small", command=py("import time; time.sleep(30)"))
        deadline = time.monotonic() + 20
        while c.get(f"/v1/jobs/{blocker}").json()["state"] != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        queued = submit(c, pool="small", command=["true"])
        # A dispatch pass has now seen the job: it stays queued because the pool's only pod
        # (its ceiling) is the blocker's.
        service = broker.embedded.broker
        core = service.core
        broker.run(service.dispatch_once())
        (only,) = broker.call(lambda: [(p.job, p.state) for p in core.tracker.pool_pods("small")])
        assert only[0] == blocker and only[1] in (PodState.ASSIGNED, PodState.RUNNING)
        assert broker.call(lambda: queued in core.queued and queued not in core.running)
        assert c.get(f"/v1/jobs/{queued}").json()["state"] == "QUEUED"
        assert c.post(f"/v1/jobs/{queued}/cancel").status_code == 200
        job = wait_job(c, queued)
        assert (job["state"], job["exit_code"], job["pods"]) == ("CANCELLED", None, [])
        deadline = time.monotonic() + 20
        while broker.call(lambda: queued in core.queued):  # the cancel hook reaches the core
            assert time.monotonic() < deadline
            time.sleep(0.05)
        c.post(f"/v1/jobs/{blocker}/cancel")
        wait_job(c, blocker, timeout=30)


def test_timeout(broker: BrokerThread) -> None:
    with broker.client() as c:
        job = run(c, command=py("import time; time.sleep(30)"), timeout_s=1.0, timeout=30)
        assert (job["state"], job["error_class"]) == ("FAILED", "Timeout")


# ---------------------------------------------------------------------- budgets under load


def test_budget_is_never_exceeded_under_200_concurrent_submissions(
    tight_broker: BrokerThread,
) -> None:
    """The high-water marks are recorded at every reservation and at every backend create,
    not sampled: a single overshoot between two samples would otherwise go unseen."""
    broker = tight_broker
    embedded = broker.embedded
    counts = HighWaterCounts(embedded.broker.ledger._used)
    live = LivePods(embedded.broker.backend, set(embedded.broker.pods.records))

    def install() -> None:
        embedded.broker.ledger._used = counts
        embedded.broker.backend.create = live.create  # type: ignore[method-assign]
        embedded.broker.backend.delete = live.delete  # type: ignore[method-assign]

    broker.call(install)
    clients = [broker.client(f"caller-{i}") for i in range(10)]
    ids: list[str] = []
    lock = threading.Lock()

    def burst(client: httpx.Client) -> None:
        for _ in range(20):
            job_id = submit(client, pool="burst", command=py("pass"), lease_tag="loop")
            with lock:
                ids.append(job_id)

    threads = [threading.Thread(target=burst, args=(cl,)) for cl in clients]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    try:
        finals: list[dict] = []  # type: ignore[type-arg]
        for cl in clients:
            for job in cl.get("/v1/jobs", params={"limit": 100}).json()["jobs"]:
                finals.append(wait_job(cl, job["id"], timeout=180))
    finally:
        for cl in clients:
            cl.close()
    assert len(ids) == 200 and len(finals) == 200
    assert all(f["state"] == "SUCCEEDED" for f in finals)
    assert live.creates > 3  # the pool churned: pods were retired and replaced under load
    assert counts.peak <= 3 and live.peak <= 3


class HighWaterCounts(dict[str, int]):
    """The ledger's counts, recording the highest value ever written."""

    def __init__(self, initial: dict[str, int]) -> None:
        super().__init__(initial)
        self.peak = max(initial.values(), default=0)

    def __setitem__(self, key: str, value: int) -> None:
        self.peak = max(self.peak, value)
        super().__setitem__(key, value)


class LivePods:
    """The backend's creates and deletes, counting pods that exist at each create."""

    def __init__(self, backend: Any, alive: set[str]) -> None:
        self._create, self._delete = backend.create, backend.delete
        self.alive = alive
        self.peak = len(self.alive)
        self.creates = 0

    async def create(self, request: Any) -> Any:
        record = await self._create(request)
        self.alive.add(record.name)
        self.creates += 1
        self.peak = max(self.peak, len(self.alive))
        return record

    async def delete(self, name: str) -> None:
        await self._delete(name)
        self.alive.discard(name)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_pod_whose_agent_dies_is_lost_and_replaced(broker: BrokerThread, how: str) -> None:
    """SIGKILL: the agent vanishes and its exit is never reported. SIGTERM (a delete from
    outside, a drained node): the agent ends its pod, killing the job, and reports that exit
    with the shutdown reason; either way the job's verdict is the pod's loss, not Killed."""
    import os
    import signal

    with broker.client() as c:
        job_id = submit(c, command=py("import time; time.sleep(60)"), lease_tag="s")
        deadline = time.monotonic() + 20
        # RUNNING is committed before the launch; `started` is stamped once the process runs.
        while c.get(f"/v1/jobs/{job_id}").json()["timings"]["started"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pod = c.get(f"/v1/jobs/{job_id}").json()["pods"][0]["name"]
        pid = broker.call(lambda: broker.embedded.broker.pods.records[pod].pid)
        os.kill(pid, getattr(signal, how))
        job = wait_job(c, job_id, timeout=30)
        assert (job["state"], job["error_class"], job["exit_code"]) == ("FAILED", "PodLost", None)
        assert gone(broker, pod)  # never reused: deleted with whatever it left behind
        again = run(c, command=py("pass"), lease_tag="s")
        assert again["state"] == "SUCCEEDED" and pod_of(again)[0] != pod


def test_a_long_poll_is_released_by_the_verdict(broker: BrokerThread) -> None:
    """`GET /v1/jobs/{id}?wait_s=60` on a real job answers when the broker commits the
    verdict (`job_finished` after `_record`), not when the 60 s run out."""
    with broker.client() as c:
        job_id = submit(c, command=py("import time; time.sleep(0.3)"), lease_tag="lp")
        sent = time.monotonic()
        answer = c.get(f"/v1/jobs/{job_id}", params={"wait_s": 60}, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "SUCCEEDED"
        assert time.monotonic() - sent < 60  # released, not timed out
        assert answer.json() == c.get(f"/v1/jobs/{job_id}").json()

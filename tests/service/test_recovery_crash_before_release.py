"""A broker SIGKILLed after a job's verdict went out but before its pod's release (the verdict
goes out before the reset, `BrokerCore.judge_before_reset`): nothing is lost or duplicated.

A real broker process whose pods' resets each take 1.5 s longer (the agent's `slow-reset`
test hook) runs alice's job; as soon as the job is SUCCEEDED it is killed, mid-reset. The
restarted broker finds the pod still marked busy with an ended job: it resets it again and
holds it for alice's session from the job's end. The job keeps its one verdict and its whole
log, with no loss noted; alice's next job of the session runs on that pod; bob never gets it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from firepool.testing.service import TERMINAL

#: The broker as `firepool serve` runs it, with the agents' `slow-reset` hook; prints its URL
#: and a token for alice and one for bob.
_SERVE = """
import asyncio, json, sys
from pathlib import Path
from firepool.composition import EmbeddedBroker
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool

async def main():
    pool = cpu_pool(min_count=2, max_count=3, idle_timeout=300.0, caller_hold_seconds=120.0)
    async with EmbeddedBroker(Path(sys.argv[1]), catalog=Catalog((pool,), {"cpu": 4}),
                              faults=("slow-reset",), delete_pods_on_exit=False) as broker:
        tokens = {c: broker.issue(c) for c in ("alice", "bob")}
        print(json.dumps({"url": broker.url, **tokens}), flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""

_CLEANUP = """
import asyncio, sys
from firepool.backends.local import LocalBackend
async def main():
    backend = LocalBackend(sys.argv[1] + "/pods")
    for pod in await backend.list_pods():
        await backend.delete(pod.name)
asyncio.run(main())
"""


def start(data: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(data)], stdout=subprocess.PIPE,
        stderr=open(data / "serve.log", "a"), text=True, start_new_session=True,  # noqa: SIM115
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, (data / "serve.log").read_text()
    return proc, json.loads(line)


def client(info: dict[str, str], caller: str) -> httpx.Client:
    return httpx.Client(
        base_url=info["url"], headers={"Authorization": f"Bearer {info[caller]}"}, timeout=30
    )


def wait_terminal(c: httpx.Client, job_id: str, timeout: float = 60) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while (job := c.get(f"/v1/jobs/{job_id}").json())["state"] not in TERMINAL:
        assert time.monotonic() < deadline, job
        time.sleep(0.02)
    return job  # type: ignore[no-any-return]


def test_a_kill_between_verdict_and_release_keeps_the_verdict_the_log_and_the_hold(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    server, info = start(data)
    try:
        with client(info, "alice") as alice:
            job_id = alice.post("/v1/jobs", json={
                "pool": "cpu", "lease_tag": "s",
                "command": [sys.executable, "-c", "print('kept'); print('once')"],
            }).json()["id"]  # fmt: skip
            done = wait_terminal(alice, job_id)
        os.killpg(server.pid, signal.SIGKILL)  # mid-reset: the reset takes 1.5 s more
        server.wait(timeout=10)
        assert done["state"] == "SUCCEEDED"
        pod = done["pods"][0]["name"]

        server, info = start(data)
        with client(info, "alice") as alice, client(info, "bob") as bob:
            after = alice.get(f"/v1/jobs/{job_id}").json()
            assert (after["state"], after["exit_code"], after["retries"]) == ("SUCCEEDED", 0, 0)
            assert after["timings"]["finished"] == done["timings"]["finished"]
            log = alice.get(f"/v1/jobs/{job_id}/logs").json()["data"]
            assert log == "kept\nonce\n"  # whole, once, and no loss noted
            pods = {p["name"]: p for p in alice.get("/v1/pods").json()["pods"]}
            assert pods[pod]["state"] == "held" and pods[pod]["owner"] == "alice"
            expected = done["timings"]["finished"] + 120.0
            assert abs(pods[pod]["hold_until"] - expected) < 0.01  # from the job's end
            theirs = bob.post("/v1/jobs", json={
                "pool": "cpu", "lease_tag": "s", "command": ["true"],
            }).json()["id"]  # fmt: skip
            again = alice.post("/v1/jobs", json={
                "pool": "cpu", "lease_tag": "s", "command": ["true"],
            }).json()["id"]  # fmt: skip
            mine = wait_terminal(alice, again)
            assert mine["state"] == "SUCCEEDED"
            assert (mine["pods"][0]["name"], mine["pods"][0]["acquisition"]) == (pod, "warm")
            assert wait_terminal(bob, theirs)["pods"][0]["name"] != pod
            metrics = alice.get("/metrics").text
            assert 'firepool_recovery_events_total{event="pod_reset_held"} 1.0' in metrics
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)

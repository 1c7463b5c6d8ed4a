"""Invariants 3 and 7 of docs/DESIGN.md, end to end on the real broker (HTTP, SQLite, local pods).

3. No user code runs before its RUNNING transition is committed: the job's first action asks
   the broker's API (which reads the store) for its own state, and must already see RUNNING,
   with its pods bound.
7. Every terminal job carries state, error class, exit code (absent if nothing exited), retry
   count, and per-pod acquisition path with reason: checked in the API's answer and in the
   store's record for a job ending in each terminal way.
"""

from __future__ import annotations

import json
import time

from firepool.model import AcquisitionPath, JobErrorClass, JobState
from firepool.testing.service import BrokerThread, run, submit, wait_job

FIRST_ACTION = """\
import json, os, urllib.request
job = os.environ["FIREPOOL_ATTEMPT"].rsplit(":", 1)[0]
request = urllib.request.Request(
    os.environ["FP_URL"] + "/v1/jobs/" + job,
    headers={"Authorization": "Bearer " + os.environ["FP_TOKEN"]},
)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
seen = json.load(opener.open(request, timeout=30))
print(json.dumps({"state": seen["state"], "pods": seen["pods"], "retries": seen["retries"]}))
"""


def test_3_user_code_starts_only_after_running_is_committed(broker: BrokerThread) -> None:
    env = {"FP_URL": broker.url, "FP_TOKEN": broker.token}
    with broker.client() as c:
        # its first action asks the broker's API over the host's loopback
        job = run(c, pool="loopback", command=["python", "-c", FIRST_ACTION], env=env,
                  lease_tag="inv3")
        assert job["state"] == "SUCCEEDED", job
        seen = json.loads(c.get(f"/v1/jobs/{job['id']}/logs").json()["data"])
    # What the job's very first statement read back from the store, through the API:
    assert seen["state"] == "RUNNING"
    assert seen["retries"] == 0
    assert [p["name"] for p in seen["pods"]] == [p["name"] for p in job["pods"]]
    # And the store's own record agrees: the attempt row was written before the launch.
    (attempt,) = broker.embedded.store.attempts(job["id"])
    assert attempt.started_at <= job["timings"]["started"]


def _check_terminal(broker: BrokerThread, answer: dict, *, exited: bool) -> None:  # type: ignore[type-arg]
    """Invariant 7 for one terminal job, in the API's answer and in the store."""
    record = broker.embedded.store.get(answer["id"])
    assert record is not None
    assert record.state.value == answer["state"]
    assert record.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
    # error class: None exactly when it succeeded
    if record.state is JobState.SUCCEEDED:
        assert record.error_class is None and answer["error_class"] is None
    else:
        assert isinstance(record.error_class, JobErrorClass)
        assert answer["error_class"] == record.error_class.value
    # exit code: present if and only if a process exited
    assert answer["exit_code"] == record.exit_code
    assert (record.exit_code is not None) == exited
    assert answer["retries"] == record.retries and isinstance(record.retries, int)
    # per-pod acquisition path with reason
    assert [p["name"] for p in answer["pods"]] == [b.pod for b in record.pods]
    for view, binding in zip(answer["pods"], record.pods, strict=True):
        assert isinstance(binding.acquisition, AcquisitionPath)
        assert view["acquisition"] == binding.acquisition.value
        assert binding.reason and view["reason"] == binding.reason


def test_7_every_terminal_job_carries_its_whole_record(broker: BrokerThread) -> None:
    with broker.client() as c:
        ok = run(c, command=["python", "-c", "pass"], lease_tag="inv7")
        assert (ok["state"], ok["exit_code"]) == ("SUCCEEDED", 0)
        _check_terminal(broker, ok, exited=True)

        failed = run(
            c, command=["python", "-c", "import sys; sys.exit(5)"], max_retries=1, lease_tag="inv7"
        )
        assert (failed["state"], failed["error_class"], failed["exit_code"]) == (
            "FAILED", "NonZeroExit", 5,
        )  # fmt: skip
        assert failed["retries"] == 1  # retried once, then failed for good
        _check_terminal(broker, failed, exited=True)
        assert failed["pods"], "a job that ran names the pods it ran on"

        never = run(c, command=["/nonexistent/binary"], lease_tag="inv7")
        assert (never["state"], never["error_class"], never["exit_code"]) == (
            "FAILED", "LaunchFailed", None,
        )  # fmt: skip
        _check_terminal(broker, never, exited=False)
        assert never["pods"], "it was placed, so its pods and paths are recorded"

        timeout = run(
            c, command=["python", "-c", "import time; time.sleep(30)"], timeout_s=1.0, timeout=30
        )
        assert (timeout["state"], timeout["error_class"]) == ("FAILED", "Timeout")
        _check_terminal(broker, timeout, exited=timeout["exit_code"] is not None)

        running = submit(c, command=["python", "-c", "import time; time.sleep(30)"])
        deadline = time.monotonic() + 20
        while c.get(f"/v1/jobs/{running}").json()["timings"]["started"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert c.post(f"/v1/jobs/{running}/cancel").status_code == 202
        cancelled = wait_job(c, running, timeout=30)
        assert (cancelled["state"], cancelled["error_class"]) == ("CANCELLED", "Cancelled")
        _check_terminal(broker, cancelled, exited=cancelled["exit_code"] is not None)
        assert cancelled["pods"]

        blocker = submit(c, pool="small", command=["python", "-c", "import time; time.sleep(30)"])
        deadline = time.monotonic() + 20
        while c.get(f"/v1/jobs/{blocker}").json()["state"] != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        queued = submit(c, pool="small", command=["true"])
        assert c.post(f"/v1/jobs/{queued}/cancel").status_code == 200  # cancelled while queued
        never_placed = wait_job(c, queued, timeout=30)
        assert (never_placed["state"], never_placed["exit_code"], never_placed["pods"]) == (
            "CANCELLED", None, [],
        )  # fmt: skip
        _check_terminal(broker, never_placed, exited=False)  # no pods, no exit code
        c.post(f"/v1/jobs/{blocker}/cancel")
        stopped = wait_job(c, blocker, timeout=30)
        _check_terminal(broker, stopped, exited=stopped["exit_code"] is not None)

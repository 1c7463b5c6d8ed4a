"""The SDK against the whole broker with real local pods: the three-line program of the issue
gets its result, exit code and acquisition path back; sessions reuse a warm pod."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from firepool.client import AsyncClient, Client, WaitTimeoutError
from firepool.model import AcquisitionPath, JobErrorClass, JobState
from firepool.testing.service import BrokerThread

MAIN = """\
import sys
print("working on", sys.argv[1:], flush=True)
sys.exit(int(sys.argv[1]))
"""


def wait_until_free(client: Client, pod: str, timeout: float = 30.0) -> None:
    """The job is reported finished before its pod's reset completes; wait for the pod."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {p.name: p.state for p in client.pods()}
        if states.get(pod) in ("idle", "held"):
            return
        time.sleep(0.05)
    raise AssertionError(f"pod {pod} did not come back: {states}")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "main.py").write_text(MAIN)
    return tmp_path / "code"


def test_run_returns_exit_code_and_acquisition(embedded: BrokerThread, package: Path) -> None:
    with Client(embedded.url, embedded.token) as client, client.session() as session:
        failed = client.run("cpu", ["python", "main.py", "3"], package=package, wait_timeout=60)
        wait_until_free(client, failed.pods[0].name)
        again = client.run("cpu", ["python", "main.py", "0"], package=package, wait_timeout=60)
        output = "".join(client.logs(failed.id))
    assert (failed.state, failed.exit_code, failed.error_class) == (
        JobState.FAILED,
        3,
        JobErrorClass.NON_ZERO_EXIT,
    )
    assert output == "working on ['3']\n"
    assert again.state == JobState.SUCCEEDED and again.exit_code == 0
    assert again.lease_tag == session.lease_tag
    # The second job of the session lands on the first one's pod, warm.
    assert again.pods[0].name == failed.pods[0].name
    assert (again.pods[0].acquisition, again.pods[0].reason) == (
        AcquisitionPath.WARM,
        "same_session",
    )


def test_a_session_runs_its_own_jobs_on_one_warm_pod(embedded: BrokerThread, package: Path) -> None:
    token = embedded.issue("session-runner")  # a caller of its own: no other test's pods
    with Client(embedded.url, token) as client:
        session = client.session(lease_tag="runner")
        first = session.run("cpu", ["python", "main.py", "0"], package=package, wait_timeout=60)
        wait_until_free(client, first.pods[0].name)
        second = session.run("cpu", ["python", "main.py", "0"], package=package, wait_timeout=60)
    assert (first.state, second.state) == (JobState.SUCCEEDED, JobState.SUCCEEDED)
    assert first.lease_tag == second.lease_tag == "runner"
    assert second.pods[0].name == first.pods[0].name
    assert (second.pods[0].acquisition, second.pods[0].reason) == (
        AcquisitionPath.WARM,
        "same_session",
    )


def test_pods_lists_the_callers_pod(embedded: BrokerThread, package: Path) -> None:
    # A caller of its own: the default caller may hold a pod from another test, and a new
    # session would recycle that pod (one job, then it retires) instead of holding it.
    token = embedded.issue("lister")
    with Client(embedded.url, token) as client, client.session() as session:
        job = client.run("cpu", ["python", "main.py", "0"], package=package, wait_timeout=60)
        pod = job.pods[0].name
        wait_until_free(client, pod)
        mine = {p.name: p for p in client.pods()}
        pools = client.pools()
    with Client(embedded.url, embedded.issue("stranger")) as other:
        theirs = {p.name: p for p in other.pods()}
    assert {p.pool for p in mine.values()} <= {p.name for p in pools}
    assert all(p.created_at > 0 and p.role in ("active", "standby") for p in mine.values())
    # The caller sees its own held pod with its owner and session ...
    assert (mine[pod].owner, mine[pod].state) == ("lister", "held")
    assert mine[pod].lease_tag == session.lease_tag and mine[pod].hold_until is not None
    # ... another caller sees the same pod, but not whose it is.
    assert theirs[pod].state == "held"
    assert (theirs[pod].owner, theirs[pod].lease_tag, theirs[pod].hold_until) == (None,) * 3


def test_async_agents_follow_their_own_logs(embedded: BrokerThread, package: Path) -> None:
    async def agent(client: AsyncClient, code: int) -> tuple[str, int | None]:
        async with client.session():
            job = await client.submit("cpu", ["python", "main.py", str(code)], package=package)
            text = "".join([chunk async for chunk in client.logs(job.id, follow=True)])
            done = await client.wait(job.id, timeout=60)
            return text, done.exit_code

    async def main() -> list[tuple[str, int | None]]:
        async with AsyncClient(embedded.url, embedded.token) as client:
            return list(await asyncio.gather(agent(client, 0), agent(client, 4)))

    assert asyncio.run(main()) == [("working on ['0']\n", 0), ("working on ['4']\n", 4)]


def test_run_of_a_short_job_is_one_request(embedded: BrokerThread) -> None:
    """The submission waits for the job's end (`wait_s`), so no second request polls."""
    sent: list[str] = []
    with Client(embedded.url, embedded.token) as client:
        client._http.event_hooks["request"].append(lambda r: sent.append(f"{r.method} {r.url}"))
        job = client.run("cpu", ["python", "-c", "pass"], wait_timeout=60)
    assert job.state is JobState.SUCCEEDED
    assert len(sent) == 1 and sent[0].startswith("POST ") and "wait_s=30" in sent[0]


def test_async_run_of_a_job_outlasting_its_timeout_raises_and_the_job_runs_on(
    embedded: BrokerThread,
) -> None:
    """The submission's own wait is bounded by `wait_timeout`: past it, `run` raises
    `WaitTimeoutError` and the job keeps running (it is not cancelled)."""

    async def main() -> str:
        async with AsyncClient(embedded.url, embedded.token) as client:
            began = time.monotonic()
            with pytest.raises(WaitTimeoutError) as raised:
                await client.run(
                    "cpu", ["python", "-c", "import time; time.sleep(3)"], wait_timeout=0.5
                )
            assert time.monotonic() - began < 2.5  # not held until the job's end
            job = await client.wait(raised.value.job_id, timeout=60)
            return job.state.value

    assert asyncio.run(main()) == "SUCCEEDED"

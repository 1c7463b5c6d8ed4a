"""The blocking SDK over real HTTP: submit, read, list, cancel, wait, run, logs, sessions."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from firepool.client import Client
from firepool.model import JobErrorClass, JobState
from firepool.testing.broker import LiveBroker


def later(delay: float, action: Callable[[], object]) -> threading.Thread:
    """Act on the store from another thread, as the dispatcher would while a client waits."""

    def go() -> None:
        time.sleep(delay)
        action()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_submit_carries_every_option(client: Client, tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy==2.0\n")
    job = client.submit(
        "cpu",
        ["python", "main.py"],
        env={"SEED": "3"},
        requirements=requirements,
        priority=5,
        max_retries=2,
        timeout_s=30,
        single_use=True,
        queue="eval",
        lease_tag="t1",
        request_id="r-1",
    )
    assert job.state == JobState.QUEUED and job.attempt == f"{job.id}:0"
    assert job.spec.requirements == "numpy==2.0\n" and job.spec.env == {"SEED": "3"}
    assert (job.queue, job.lease_tag, job.request_id) == ("eval", "t1", "r-1")
    assert job.spec.single_use and job.spec.max_retries == 2 and job.spec.timeout_s == 30
    assert client.get(job.id) == job
    again = client.submit(
        "cpu",
        ["python", "main.py"],
        env={"SEED": "3"},
        requirements="numpy==2.0\n",
        priority=5,
        max_retries=2,
        timeout_s=30,
        single_use=True,
        queue="eval",
        lease_tag="t1",
        request_id="r-1",
    )
    assert again.id == job.id  # a retried request_id returns the first job


def test_list_filters_and_cancel(client: Client) -> None:
    a = client.submit("cpu", ["a"])
    b = client.submit("gpu", ["b"], queue="q2")
    cancelled = client.cancel(a.id)
    assert (
        cancelled.state == JobState.CANCELLED and cancelled.error_class == JobErrorClass.CANCELLED
    )
    assert [j.id for j in client.list()] == [a.id, b.id]
    assert [j.id for j in client.list(state="QUEUED")] == [b.id]
    assert [j.id for j in client.list(state=[JobState.QUEUED, JobState.CANCELLED])] == [a.id, b.id]
    assert [j.id for j in client.list(pool="gpu")] == [b.id]
    assert [j.id for j in client.list(queue="q2", limit=1)] == [b.id]


def test_cancel_running_is_pending(client: Client, broker: LiveBroker) -> None:
    job = client.submit("cpu", ["sleep", "60"])
    broker.start(job.id)
    answer = client.cancel(job.id)
    assert answer.state == JobState.RUNNING and answer.cancel_requested


def test_wait_polls_until_terminal(client: Client, broker: LiveBroker) -> None:
    job = client.submit("cpu", ["python", "main.py"])
    worker = later(
        0.3,
        lambda: broker.finish(
            job.id, JobState.FAILED, exit_code=3, error_class=JobErrorClass.NON_ZERO_EXIT
        ),
    )
    done = client.wait(job.id, timeout=20)
    worker.join()
    assert done.state == JobState.FAILED and done.exit_code == 3
    assert done.error_class == JobErrorClass.NON_ZERO_EXIT
    assert [(p.name, p.acquisition.value, p.reason) for p in done.pods] == [
        ("cpu-0", "warm", "no_own_pod")
    ]
    assert done.timings.finished is not None


def test_run_is_submit_then_wait(client: Client, broker: LiveBroker) -> None:
    def finish_first_queued() -> None:
        for _ in range(200):
            jobs = broker.store.list_jobs(states=[JobState.QUEUED])
            if jobs:
                broker.finish(jobs[0].id, exit_code=0)
                return
            time.sleep(0.02)

    worker = later(0.0, finish_first_queued)
    job = client.run("cpu", ["python", "main.py"], wait_timeout=20)
    worker.join()
    assert job.state == JobState.SUCCEEDED and job.exit_code == 0


def test_logs_read_and_follow_across_attempts(client: Client, broker: LiveBroker) -> None:
    job = client.submit("cpu", ["python", "main.py"], max_retries=1)
    assert list(client.logs(job.id)) == []  # queued: nothing yet, and no waiting
    broker.start(job.id)
    broker.log(job.id, "first attempt\n")
    assert "".join(client.logs(job.id)) == "first attempt\n"

    def the_rest() -> None:
        broker.retry(job.id)
        broker.start(job.id, pod="cpu-1")
        broker.log(job.id, "second ", retry=1)
        time.sleep(0.2)
        broker.log(job.id, "attempt\n", retry=1)
        broker.finish(job.id)

    worker = later(0.2, the_rest)
    followed = "".join(client.logs(job.id, follow=True))
    worker.join()
    assert followed == "first attempt\nsecond attempt\n"
    assert "".join(client.logs(job.id, attempt=1)) == "second attempt\n"


def test_sessions_stamp_submissions(client: Client) -> None:
    with client.session(lease_tag="agent-1", queue="agents") as outer:
        first = client.submit("cpu", ["a"])
        with client.session() as inner:
            second = client.submit("cpu", ["b"])
        explicit = client.submit("cpu", ["c"], lease_tag="mine")
        third = client.submit("cpu", ["d"])
    after = client.submit("cpu", ["e"])
    assert (first.lease_tag, first.queue) == ("agent-1", "agents")
    assert inner.lease_tag.startswith("session-") and second.lease_tag == inner.lease_tag
    assert second.queue == "default" and explicit.lease_tag == "mine"
    assert third.lease_tag == outer.lease_tag and (after.lease_tag, after.queue) == ("", "default")


def test_a_session_submits_itself_entered_or_not(client: Client) -> None:
    session = client.session(lease_tag="agent-2", queue="agents")
    own = session.submit("cpu", ["a"])  # never entered: like requests.Session.get
    assert (own.lease_tag, own.queue) == ("agent-2", "agents")
    assert client.submit("cpu", ["b"]).lease_tag == ""  # the client's calls stay unstamped
    explicit = session.submit("cpu", ["c"], lease_tag="mine", queue="q")
    assert (explicit.lease_tag, explicit.queue) == ("mine", "q")
    with client.session(lease_tag="outer") as outer:
        inner = session.submit("cpu", ["d"])  # the session's own fields win over the entered
        assert client.submit("cpu", ["e"]).lease_tag == outer.lease_tag
    assert inner.lease_tag == "agent-2"
    with session as entered:
        assert entered is session and client.submit("cpu", ["f"]).lease_tag == "agent-2"


def test_one_session_object_shared_by_threads(client: Client) -> None:
    session = client.session(lease_tag="shared")
    start = threading.Barrier(4, timeout=30)
    tags: list[str] = []

    def agent() -> None:
        start.wait()
        for _ in range(3):
            tags.append(session.submit("cpu", ["x"]).lease_tag)

    threads = [threading.Thread(target=agent) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert tags == ["shared"] * 12
    assert client.submit("cpu", ["y"]).lease_tag == ""


def test_sessions_are_per_thread(client: Client) -> None:
    tags: dict[str, str] = {}
    inside = threading.Barrier(3, timeout=30)  # all three sessions are open at once ...
    submitted = threading.Barrier(3, timeout=30)  # ... and stay open until all submitted

    def agent(name: str) -> None:
        with client.session(lease_tag=name):
            inside.wait()
            tags[name] = client.submit("cpu", ["x"]).lease_tag
            submitted.wait()

    threads = [threading.Thread(target=agent, args=(f"agent-{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tags == {f"agent-{i}": f"agent-{i}" for i in range(3)}


def test_wait_is_one_long_poll(client: Client, broker: LiveBroker) -> None:
    """`wait` asks the broker to hold the request (`wait_s`) and the finish releases it: one
    request for the whole wait instead of a poll every backoff step."""
    job = client.submit("cpu", ["python", "main.py"])
    gets: list[str] = []
    client._http.event_hooks["request"].append(
        lambda request: gets.append(str(request.url)) if request.method == "GET" else None
    )
    worker = later(0.3, lambda: broker.finish(job.id, exit_code=0))
    done = client.wait(job.id, timeout=50)
    worker.join()
    assert done.state == JobState.SUCCEEDED
    assert len(gets) == 1 and "wait_s=30" in gets[0]


def test_wait_timeout_still_raises_with_long_polls(client: Client) -> None:
    from firepool.client import WaitTimeoutError

    job = client.submit("cpu", ["python", "main.py"])
    try:
        client.wait(job.id, timeout=0.3)
    except WaitTimeoutError as err:
        assert job.id in str(err)
    else:
        raise AssertionError("wait returned a job that never ran")

"""`GET /v1/jobs/{id}?wait_s=N`: a request parked until the job is terminal.

Each test parks a request on a thread, waits until the API holds it (its waiter is
registered), then moves the job on the way the service or a caller would and checks what the
parked request answered. No test depends on how fast anything is: the only bounds are
"the parked request came back before its own `wait_s` ran out" liveness checks.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from api_harness import Api

from firepool.model import AcquisitionPath, JobState
from firepool.store import JobRecord, PodBinding

JOB = {"pool": "cpu", "command": ["python", "main.py"]}
HELD = 60  # seconds a parked request may be held: far beyond what any test needs


class Parked:
    """A long poll on a thread of its own."""

    def __init__(self, client: httpx.Client, job_id: str, wait_s: float = HELD) -> None:
        self.response: httpx.Response | None = None
        self.sent = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, args=(client, job_id, wait_s), daemon=True
        )
        self._thread.start()

    def _run(self, client: httpx.Client, job_id: str, wait_s: float) -> None:
        self.response = client.get(
            f"/v1/jobs/{job_id}", params={"wait_s": wait_s}, timeout=HELD + 30
        )

    def answer(self) -> dict[str, Any]:
        self._thread.join(timeout=HELD + 30)
        assert self.response is not None, "the parked request never answered"
        assert self.response.status_code == 200, self.response.text
        body: dict[str, Any] = self.response.json()
        return body


def parked_count_reaches(api: Api, count: int) -> None:
    """Wait until `count` requests are parked (registration precedes their read)."""
    deadline = time.monotonic() + 30
    while len(api.context.waiters) < count:
        assert time.monotonic() < deadline, "the request was never parked"
        time.sleep(0.01)


def start(api: Api, job_id: str) -> None:
    job = api.store.get(job_id)
    assert job is not None
    api.store.start(job, [PodBinding(0, "cpu-1", AcquisitionPath.WARM, "no_own_pod")], now=5.0)


def test_released_when_the_service_commits_the_verdict(api: Api) -> None:
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    start(api, job_id)
    parked = [Parked(api.alice, job_id), Parked(api.alice, job_id)]
    parked_count_reaches(api, 2)
    running = api.store.get(job_id)
    assert running is not None
    final = api.store.finish(running, JobState.SUCCEEDED, now=9.0, exit_code=0)
    api.hooks.job_finished(final)  # what service/broker.py does after the commit
    for request in parked:
        body = request.answer()
        assert body["state"] == "SUCCEEDED" and body["exit_code"] == 0
        assert body == api.alice.get(f"/v1/jobs/{job_id}").json()  # the stored record
        assert time.monotonic() - request.sent < HELD  # released, not timed out
    assert len(api.context.waiters) == 0


def test_released_by_a_cancel(api: Api) -> None:
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    parked = Parked(api.alice, job_id)
    parked_count_reaches(api, 1)
    assert api.alice.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    body = parked.answer()
    assert body["state"] == "CANCELLED" and body["error_class"] == "Cancelled"
    assert time.monotonic() - parked.sent < HELD
    assert api.hooks.finished == [job_id]


def test_a_running_cancel_does_not_release_until_the_job_ends(api: Api) -> None:
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    start(api, job_id)
    parked = Parked(api.alice, job_id)
    parked_count_reaches(api, 1)
    assert api.alice.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    assert len(api.context.waiters) == 1  # still RUNNING: still parked
    running = api.store.get(job_id)
    assert running is not None
    final = api.store.finish(running, JobState.CANCELLED, now=9.0)
    api.hooks.job_finished(final)
    assert parked.answer()["state"] == "CANCELLED"


def test_timeout_answers_the_current_state(api: Api) -> None:
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    body = Parked(api.alice, job_id, wait_s=0.2).answer()
    assert body["state"] == "QUEUED" and body["id"] == job_id
    assert len(api.context.waiters) == 0


def test_a_terminal_job_answers_at_once_and_a_stranger_gets_404(api: Api) -> None:
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    api.alice.post(f"/v1/jobs/{job_id}/cancel")
    assert Parked(api.alice, job_id).answer()["state"] == "CANCELLED"
    stranger = api.bob.get(f"/v1/jobs/{job_id}", params={"wait_s": 1})
    assert stranger.status_code == 404 and stranger.json()["field"] == "id"
    assert len(api.context.waiters) == 0


@pytest.mark.parametrize("bad", ["-1", "61", "soon", "nan", "inf", ""])
def test_bad_wait_s_is_a_typed_422_naming_the_field(api: Api, bad: str) -> None:
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    answer = api.alice.get(f"/v1/jobs/{job_id}", params={"wait_s": bad})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "ValidationError"
    assert answer.json()["field"] == "wait_s"


def test_wait_s_is_published_with_its_bounds(api: Api) -> None:
    document = api.anonymous.get("/openapi.json").json()
    operation = document["paths"]["/v1/jobs/{job_id}"]["get"]
    [param] = [p for p in operation["parameters"] if p["name"] == "wait_s"]
    assert param["in"] == "query" and not param.get("required", False)
    bounds = next(s for s in param["schema"]["anyOf"] if s.get("type") == "number")
    assert (bounds["minimum"], bounds["maximum"]) == (0, 60)
    assert "422" in operation["responses"]


class ParkedSubmit(Parked):
    """`POST /v1/jobs?wait_s=N` on a thread of its own: submit and wait in one request."""

    def __init__(self, client: httpx.Client, body: dict[str, Any], wait_s: float = HELD) -> None:
        self.body = body
        super().__init__(client, "", wait_s)

    def _run(self, client: httpx.Client, job_id: str, wait_s: float) -> None:
        self.response = client.post(
            "/v1/jobs", json=self.body, params={"wait_s": wait_s}, timeout=HELD + 30
        )

    def answer(self) -> dict[str, Any]:
        self._thread.join(timeout=HELD + 30)
        assert self.response is not None, "the submission never answered"
        assert self.response.status_code == 201, self.response.text
        body: dict[str, Any] = self.response.json()
        return body


def test_a_waiting_submission_answers_with_the_verdict(api: Api) -> None:
    parked = ParkedSubmit(api.alice, {**JOB, "request_id": "once"})
    parked_count_reaches(api, 1)  # created, then parked on its own job
    (queued,) = api.store.list_jobs(caller="alice")
    start(api, queued.id)
    running = api.store.get(queued.id)
    assert running is not None
    api.hooks.job_finished(api.store.finish(running, JobState.FAILED, now=9.0, exit_code=3))
    body = parked.answer()
    assert body["id"] == queued.id and body["state"] == "FAILED" and body["exit_code"] == 3
    assert time.monotonic() - parked.sent < HELD
    # The same request id again: the first job, answered at once since it is terminal.
    again = api.alice.post("/v1/jobs", json={**JOB, "request_id": "once"}, params={"wait_s": 5})
    assert again.status_code == 200 and again.json()["id"] == queued.id
    assert again.json()["state"] == "FAILED"


def test_a_waiting_submission_answers_queued_when_its_wait_runs_out(api: Api) -> None:
    response = api.alice.post("/v1/jobs", json=JOB, params={"wait_s": 0.2})
    assert response.status_code == 201
    assert response.json()["state"] == "QUEUED"
    assert len(api.context.waiters) == 0


@pytest.mark.parametrize("wait_s", ["-1", "61", "soon"])
def test_a_submissions_bad_wait_is_refused_and_nothing_is_queued(api: Api, wait_s: str) -> None:
    response = api.alice.post("/v1/jobs", json=JOB, params={"wait_s": wait_s})
    assert response.status_code == 422
    assert response.json()["field"] == "wait_s"
    assert api.alice.get("/v1/jobs").json()["jobs"] == []


def test_a_waiting_submission_reads_its_new_job_once_at_its_end(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job this request created needs no read before the wait (see
    `services.jobs.wait_for_created`): one read of the stored record, after the verdict."""
    reads: list[str] = []
    real_get = api.context.store.get

    def counted(job_id: str) -> JobRecord | None:
        reads.append(job_id)
        return real_get(job_id)

    monkeypatch.setattr(api.context.store, "get", counted)
    parked = ParkedSubmit(api.alice, JOB)
    parked_count_reaches(api, 1)
    assert reads == []
    (queued,) = api.store.list_jobs(caller="alice")
    start(api, queued.id)
    running = real_get(queued.id)
    assert running is not None
    reads.clear()  # the test's own read in `start`
    api.hooks.job_finished(api.store.finish(running, JobState.SUCCEEDED, now=9.0, exit_code=0))
    body = parked.answer()
    assert body["state"] == "SUCCEEDED" and body["timings"]["assigned"] == 5.0
    assert reads == [queued.id]


def test_a_replayed_waiting_submission_of_a_running_job_waits_for_its_end(api: Api) -> None:
    """A replay names an older job, which may end at any time: it is read after its waiter
    is registered, and answered with the verdict."""
    first = api.alice.post("/v1/jobs", json={**JOB, "request_id": "r1"})
    assert first.status_code == 201
    job_id = first.json()["id"]
    start(api, job_id)
    parked = Parked(api.alice, job_id)  # one long poll already parked on the job
    replay = threading.Thread(
        target=lambda: replies.append(
            api.alice.post(
                "/v1/jobs", json={**JOB, "request_id": "r1"}, params={"wait_s": HELD},
                timeout=HELD + 30,
            )
        ),
        daemon=True,
    )
    replies: list[httpx.Response] = []
    replay.start()
    parked_count_reaches(api, 2)
    running = api.store.get(job_id)
    assert running is not None
    api.hooks.job_finished(api.store.finish(running, JobState.FAILED, now=9.0, exit_code=4))
    replay.join(timeout=HELD + 30)
    (reply,) = replies
    assert reply.status_code == 200 and reply.json()["id"] == job_id
    assert reply.json()["state"] == "FAILED" and reply.json()["exit_code"] == 4
    assert parked.answer()["state"] == "FAILED"


def test_a_verdict_record_carrying_its_start_is_answered_without_a_read(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker adds an attempt's start stamps to its record once they are stored, so the
    verdict's record is the stored row: the parked request answers with it, unread."""
    from dataclasses import replace

    from firepool.store.records import timings

    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    start(api, job_id)
    running = api.store.get(job_id)
    assert running is not None
    stamps = {"started": 6.0, "first_instruction": 6.0}
    api.store.record_timings(running, stamps)  # stored first, as `_record_start` does
    running = replace(running, timings=timings(running.timings, **stamps))
    reads: list[str] = []
    real_get = api.context.store.get

    def counted(job: str) -> JobRecord | None:
        reads.append(job)
        return real_get(job)

    parked = Parked(api.alice, job_id)
    parked_count_reaches(api, 1)
    monkeypatch.setattr(api.context.store, "get", counted)
    api.hooks.job_finished(api.store.finish(running, JobState.SUCCEEDED, now=9.0, exit_code=0))
    body = parked.answer()
    assert reads == []
    monkeypatch.undo()
    assert body == api.alice.get(f"/v1/jobs/{job_id}").json()  # the stored record, all of it
    assert body["timings"]["started"] == 6.0 and body["timings"]["finished"] == 9.0


def test_a_verdict_record_without_its_start_is_read_back_with_the_stamps_stored_since(
    api: Api,
) -> None:
    """Stamps stored after the verdict's record was built (written off the critical path,
    they may land late) are in the answer: without them the record is read back."""
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    start(api, job_id)
    running = api.store.get(job_id)
    assert running is not None
    parked = Parked(api.alice, job_id)
    parked_count_reaches(api, 1)
    final = api.store.finish(running, JobState.SUCCEEDED, now=9.0, exit_code=0)
    api.store.record_timings(running, {"started": 6.0, "first_instruction": 6.0})  # landed late
    api.hooks.job_finished(final)
    body = parked.answer()
    assert body["timings"]["started"] == 6.0
    assert body == api.alice.get(f"/v1/jobs/{job_id}").json()

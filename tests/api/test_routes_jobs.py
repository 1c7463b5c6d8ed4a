"""The job resource over real HTTP: submit, read, list, cancel, logs."""

from __future__ import annotations

from api_harness import Api

from firepool.model import AcquisitionPath, JobState
from firepool.store import PodBinding

JOB = {"pool": "cpu", "command": ["python", "main.py"]}


def test_submit_then_read_back(api: Api) -> None:
    response = api.alice.post("/v1/jobs", json={**JOB, "env": {"SEED": "1"}, "queue": "eval"})
    assert response.status_code == 201
    body = response.json()
    assert body["state"] == "QUEUED" and body["attempt"] == f"{body['id']}:0"
    assert body["spec"]["env"] == {"SEED": "1"} and body["queue"] == "eval"
    assert body["timings"]["submitted"] is not None and body["pods"] == []
    assert api.alice.get(f"/v1/jobs/{body['id']}").json() == body
    assert api.hooks.submitted == [body["id"]]


def test_request_id_retries_return_the_first_job(api: Api) -> None:
    first = api.alice.post("/v1/jobs", json={**JOB, "request_id": "step-7"})
    again = api.alice.post("/v1/jobs", json={**JOB, "request_id": "step-7"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    clash = api.alice.post("/v1/jobs", json={**JOB, "command": ["other"], "request_id": "step-7"})
    assert clash.status_code == 409
    assert clash.json() == {
        "error": "Conflict",
        "message": clash.json()["message"],
        "field": "request_id",
    }
    assert api.job_count() == 1 and api.hooks.submitted == [first.json()["id"]]


def test_callers_see_only_their_own_jobs(api: Api) -> None:
    mine = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    theirs = api.bob.post("/v1/jobs", json={**JOB, "pool": "gpu"}).json()["id"]
    assert [j["id"] for j in api.alice.get("/v1/jobs").json()["jobs"]] == [mine]
    assert [j["id"] for j in api.bob.get("/v1/jobs").json()["jobs"]] == [theirs]
    for path in (f"/v1/jobs/{theirs}", f"/v1/jobs/{theirs}/logs"):
        answer = api.alice.get(path)
        assert answer.status_code == 404 and answer.json()["error"] == "NotFound"
        assert answer.json() == api.alice.get(path.replace(theirs, "f" * 16)).json() | {
            "message": answer.json()["message"].replace("f" * 16, theirs)
        }
    assert api.alice.post(f"/v1/jobs/{theirs}/cancel").status_code == 404
    job = api.store.get(theirs)
    assert job is not None and job.state == JobState.QUEUED


def test_list_filters(api: Api) -> None:
    a = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    b = api.alice.post("/v1/jobs", json={**JOB, "pool": "gpu", "queue": "q2"}).json()["id"]
    api.alice.post(f"/v1/jobs/{a}/cancel")

    def ids(query: str) -> list[str]:
        response = api.alice.get(f"/v1/jobs{query}")
        assert response.status_code == 200, response.text
        return [j["id"] for j in response.json()["jobs"]]

    assert ids("") == [a, b]
    assert ids("?state=QUEUED") == [b]
    assert ids("?state=QUEUED&state=CANCELLED") == [a, b]
    assert ids("?pool=gpu") == [b] and ids("?queue=q2") == [b] and ids("?queue=none") == []
    assert ids("?limit=1") == [a]
    page = api.alice.get("/v1/jobs?limit=1").json()
    assert page["next"] == a
    assert ids(f"?limit=1&after={page['next']}") == [b]
    assert api.alice.get("/v1/jobs?limit=5").json()["next"] is None
    bad = api.alice.get("/v1/jobs?stat=QUEUED")
    assert bad.status_code == 422 and bad.json()["field"] == "stat"
    assert api.alice.get("/v1/jobs?state=DONE").json()["field"] == "state.0"


def test_cancel_queued_is_immediate_and_running_is_handed_to_the_dispatcher(api: Api) -> None:
    queued = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    answer = api.alice.post(f"/v1/jobs/{queued}/cancel")
    assert answer.status_code == 200
    assert answer.json()["state"] == "CANCELLED" and answer.json()["error_class"] == "Cancelled"
    assert api.hooks.cancels == [queued]  # the dispatcher forgets it at once
    assert api.alice.post(f"/v1/jobs/{queued}/cancel").status_code == 200
    assert api.hooks.cancels == [queued]  # already cancelled: no second signal

    running_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    job = api.store.get(running_id)
    assert job is not None
    api.store.start(job, [PodBinding(0, "cpu-1", AcquisitionPath.WARM, "no_own_pod")], now=5.0)
    answer = api.alice.post(f"/v1/jobs/{running_id}/cancel")
    assert answer.status_code == 202
    body = answer.json()
    assert body["state"] == "RUNNING" and body["cancel_requested"] is True
    assert body["pods"] == [
        {"rank": 0, "name": "cpu-1", "pool": "cpu", "acquisition": "warm", "reason": "no_own_pod"}
    ]
    assert api.alice.post(f"/v1/jobs/{running_id}/cancel").status_code == 202
    assert api.hooks.cancels == [queued, running_id]  # once each, on the first request


def test_logs_are_served_by_byte_range(api: Api) -> None:
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    api.logs.append(job_id, 0, b"hello\n")
    first = api.alice.get(f"/v1/jobs/{job_id}/logs").json()
    assert first["data"] == "hello\n" and first["next_offset"] == 6 and not first["complete"]
    api.logs.append(job_id, 0, b"world\n")
    follow = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"offset": 6}).json()
    assert follow["data"] == "world\n" and follow["size"] == 12
    api.alice.post(f"/v1/jobs/{job_id}/cancel")
    done = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"offset": 12}).json()
    assert done["data"] == "" and done["complete"]
    part = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"offset": 2, "limit": 3}).json()
    assert part["data"] == "llo" and part["next_offset"] == 5
    missing = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"attempt": 3})
    assert missing.status_code == 404 and missing.json()["field"] == "attempt"


def test_logs_of_another_rank_are_read_by_rank_and_checked_against_the_pods(api: Api) -> None:
    job_id = api.alice.post("/v1/jobs", json=JOB).json()["id"]
    api.logs.append_stream(job_id, 0, 0, "stdout", 0, b"rank zero\n")
    api.logs.append_stream(job_id, 0, 1, "stderr", 0, b"rank one\n")
    assert api.alice.get(f"/v1/jobs/{job_id}/logs").json()["data"] == "rank zero\n"
    zero = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0}).json()
    assert zero["data"] == "rank zero\n"  # rank 0 is the default, said or not
    one = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"rank": 1}).json()
    assert (one["data"], one["size"]) == ("rank one\n", 9)
    bad = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"rank": -1})
    assert bad.status_code == 422 and bad.json()["field"] == "rank"
    job = api.store.get(job_id)
    assert job is not None
    api.store.start(job, [PodBinding(0, "cpu-1", AcquisitionPath.WARM, "no_own_pod")], now=5.0)
    beyond = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"rank": 1})
    assert beyond.status_code == 404 and beyond.json()["field"] == "rank"
    other = api.bob.get(f"/v1/jobs/{job_id}/logs", params={"rank": 1})
    assert other.status_code == 404  # another caller's job stays invisible, whatever the rank

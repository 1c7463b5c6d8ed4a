"""A job naming an image its pool does not admit gets a typed 422 and nothing is stored; an
admitted image is recorded with the job."""

from __future__ import annotations

from api_harness import Api
from test_errors_bad_input import error_of

from firepool.client.errors import error_from_body
from firepool.model import ImageNotAllowedError

JOB = {"pool": "cpu", "command": ["python", "main.py"]}
PINNED = "registry.local/team/trainer@sha256:" + "ab" * 32


def test_an_image_outside_the_allowlist_is_refused_and_nothing_stored(api: Api) -> None:
    for pool, image in (("cpu", "docker.io/library/python:3.11"), ("gpu", PINNED)):
        body = error_of(api.alice.post("/v1/jobs", json={**JOB, "pool": pool, "image": image}), 422)
        assert (body["error"], body["field"]) == ("ImageNotAllowed", "image")
        assert image in str(body["message"])
        assert isinstance(error_from_body(422, body), ImageNotAllowedError)
    bad = error_of(api.alice.post("/v1/jobs", json={**JOB, "image": "not an image"}), 422)
    assert (bad["error"], bad["field"]) == ("ValidationError", "image")
    assert api.job_count() == 0 and api.hooks.submitted == []


def test_an_admitted_image_is_recorded_with_the_job(api: Api) -> None:
    made = api.alice.post("/v1/jobs", json={**JOB, "image": PINNED})
    assert made.status_code == 201, made.text
    assert api.store.get(made.json()["id"]).spec.image == PINNED  # type: ignore[union-attr]
    assert api.alice.post("/v1/jobs", json={**JOB, "image": "registry.local/team:v2"}).is_success

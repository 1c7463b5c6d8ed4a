"""Every refused request: the right status, the one error shape, and nothing stored."""

from __future__ import annotations

import hashlib
import io
import random
import struct
import zipfile

import httpx
import pytest
from api_harness import Api

JOB = {"pool": "cpu", "command": ["python", "main.py"]}


def error_of(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) - {"problems"} == {"error", "message", "field"}
    assert isinstance(body["message"], str) and body["message"]
    if "problems" in body:  # a rejected body lists every problem; the headline is one of them
        problems = body["problems"]
        assert problems and all(set(p) == {"error", "message", "field"} for p in problems)
        assert (body["error"], body["field"]) in {(p["error"], p["field"]) for p in problems}
    return dict(body)


def test_every_problem_is_listed_and_a_typo_gets_a_suggestion(api: Api) -> None:
    payload = {"pool": "cpu", "comand": ["x"], "pods": 0, "env": {"LD_PRELOAD": "/x.so"}}
    body = error_of(api.alice.post("/v1/jobs", json=payload), 422)
    problems = {p["field"]: p for p in body["problems"]}  # type: ignore[attr-defined]
    assert set(problems) == {"command", "comand", "pods", "env.LD_PRELOAD"}
    assert problems["comand"]["message"] == "unknown field 'comand'; did you mean 'command'?"
    assert problems["pods"]["error"] == "ValidationError"
    # the headline is the most specific class, so the SDK raises ForbiddenEnvError
    assert (body["error"], body["field"]) == ("ForbiddenEnv", "env.LD_PRELOAD")
    assert str(body["message"]).startswith("4 problems: ")
    assert api.job_count() == 0


def test_suggestions_inside_nested_objects_and_query_strings(api: Api) -> None:
    elastic = {**JOB, "kind": "elastic", "elastic": {"app": "cifar10", "max_pod": 2}}
    body = error_of(api.alice.post("/v1/jobs", json=elastic), 422)
    assert body["field"] == "elastic.max_pod"
    assert body["message"] == "unknown field 'elastic.max_pod'; did you mean 'elastic.max_pods'?"
    far = error_of(api.alice.post("/v1/jobs", json={**JOB, "zzzz": 1}), 422)
    assert far["message"] == "unknown field 'zzzz'"  # nothing close: no guess
    query = error_of(api.alice.get("/v1/jobs", params={"stat": "QUEUED"}), 422)
    assert query["message"] == "unknown query parameter 'stat'; did you mean 'state'?"
    assert query["field"] == "stat"


@pytest.mark.parametrize(
    ("payload", "error", "field"),
    [
        ({**JOB, "piority": 3}, "ValidationError", "piority"),
        ({**JOB, "caller": "mallory"}, "ValidationError", "caller"),
        ({**JOB, "pods": "two"}, "ValidationError", "pods"),
        ({**JOB, "pods": 0}, "ValidationError", "pods"),
        ({**JOB, "command": "python main.py"}, "ValidationError", "command"),
        ({**JOB, "env": {"K": 1}}, "ValidationError", "env.K"),
        ({"command": ["x"]}, "ValidationError", "pool"),
        ({**JOB, "env": {"LD_PRELOAD": "/tmp/x.so"}}, "ForbiddenEnv", "env.LD_PRELOAD"),
        ({**JOB, "env": {"OK": "1", "PYTHONPATH": "/x"}}, "ForbiddenEnv", "env.PYTHONPATH"),
        ({**JOB, "env": {"FIREPOOL_TOKEN": "x"}}, "ForbiddenEnv", "env.FIREPOOL_TOKEN"),
        (
            {**JOB, "env": {"CUDA_DEVICE_MEMORY_LIMIT_0": "1g"}},
            "ForbiddenEnv",
            "env.CUDA_DEVICE_MEMORY_LIMIT_0",
        ),
        ({**JOB, "env": {"MASTER_ADDR": "evil"}}, "ForbiddenEnv", "env.MASTER_ADDR"),
        ({**JOB, "pool": "tpu"}, "UnknownPool", "pool"),
        ({**JOB, "pods": 5}, "ValidationError", "pods"),
        ({**JOB, "pods": 2}, "ValidationError", "pods"),  # a gang on an isolating pool
        ({**JOB, "package": "sha256:" + "0" * 64}, "ValidationError", "package"),
        ({**JOB, "package": "md5:abc"}, "ValidationError", "package"),
    ],
)
def test_bad_job_specs_are_refused(
    api: Api, payload: dict[str, object], error: str, field: str
) -> None:
    body = error_of(api.alice.post("/v1/jobs", json=payload), 422)
    assert (body["error"], body["field"]) == (error, field)
    assert api.job_count() == 0 and api.hooks.submitted == []


def test_malformed_bodies_are_refused(api: Api) -> None:
    for content in (b"{not json", b"[]", b"null", b""):
        response = api.alice.post(
            "/v1/jobs", content=content, headers={"Content-Type": "application/json"}
        )
        assert error_of(response, 422)["error"] == "ValidationError"
    assert api.job_count() == 0


def test_oversized_bodies_are_refused(api: Api) -> None:
    big = {**JOB, "requirements": "x" * 100_000}  # over the 64 KiB cap this app was given
    body = error_of(api.alice.post("/v1/jobs", json=big), 413)
    assert body["error"] == "PayloadTooLarge"

    def chunks() -> object:
        yield b'{"pool": "cpu", "command": ["x"], "requirements": "'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"}'

    streamed = api.alice.post(
        "/v1/jobs",
        content=chunks(),
        headers={"Content-Type": "application/json"},  # type: ignore[arg-type]
    )
    assert error_of(streamed, 413)["error"] == "PayloadTooLarge"
    assert api.job_count() == 0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer fp_wrong"},
        {"Authorization": "Basic YWxpY2U6eA=="},
        {"Authorization": "Bearer"},
    ],
    ids=["missing", "unknown", "basic", "empty"],
)
def test_missing_or_bad_tokens_are_refused(api: Api, headers: dict[str, str]) -> None:
    for method, path in (
        ("POST", "/v1/jobs"),
        ("GET", "/v1/jobs"),
        ("GET", "/v1/pools"),
        ("POST", "/v1/packages"),
    ):
        response = api.anonymous.request(method, path, json=JOB, headers=headers)
        body = error_of(response, 401)
        assert body["error"] == "Unauthorized" and body["field"] == "Authorization"
        assert response.headers["www-authenticate"] == "Bearer"
    assert api.job_count() == 0 and api.packages.blobs() == []


def _zip(members: dict[str, bytes], symlink: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = 0o120777 << 16
            archive.writestr(info, "/etc/shadow")
    return buffer.getvalue()


def _bomb() -> bytes:
    blob = _zip({"a.bin": b"0"})
    at = blob.index(b"PK\x01\x02")
    return blob[: at + 24] + struct.pack("<I", 3_000_000_000) + blob[at + 28 :]


@pytest.mark.parametrize(
    ("blob", "status", "error"),
    [
        (_zip({"../../etc/cron.d/x": b"x"}), 422, "BadPackage"),
        (_zip({"/abs/path.py": b"x"}), 422, "BadPackage"),
        (_zip({"main.py": b"x"}, symlink="link"), 422, "BadPackage"),
        (_bomb(), 422, "BadPackage"),
        (b"PK\x03\x04garbage" * 10, 422, "BadPackage"),
        (b"", 422, "BadPackage"),
        (_zip({"big.bin": random.Random(0).randbytes(300_000)}), 413, "PayloadTooLarge"),
    ],
    ids=["dotdot", "absolute", "symlink", "bomb", "corrupt", "empty", "too-large"],
)
def test_bad_packages_are_refused_and_not_kept(
    api: Api, blob: bytes, status: int, error: str
) -> None:
    response = api.alice.post(
        "/v1/packages", content=blob, headers={"Content-Type": "application/zip"}
    )
    body = error_of(response, status)
    assert body["error"] == error
    assert api.packages.blobs() == [] and list(api.packages.tmp_dir.iterdir()) == []
    # Not recorded under the digest of the bytes that were sent (the only one it could have).
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    assert api.store.get_package(digest) is None
    # The same lookup finds an accepted upload, so the check above can fail.
    good = _zip({"main.py": b"print(1)\n"})
    accepted = api.alice.post(
        "/v1/packages", content=good, headers={"Content-Type": "application/zip"}
    )
    assert accepted.status_code == 201, accepted.text
    assert api.store.get_package("sha256:" + hashlib.sha256(good).hexdigest()) is not None

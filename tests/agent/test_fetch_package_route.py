"""Who may fetch a package through the broker's internal route (`/internal/v1/packages/...`).

Pods fetch the code of the job they run with their own pod secret. Nobody else may: not an
anonymous client, not a caller's API token, and not a job inside a pod (it has no secret: the
agent's config is hidden and its environment unreadable, see test_hostile_jobs.py; in private
mode it cannot even reach the broker, see test_hostile_network.py).
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from pod_helpers import new_root

from firepool.testing.service import BrokerThread, running_broker, submit, wait_job

pytestmark = pytest.mark.timeout(180)


def _zip(text: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("main.py", text)
    return buf.getvalue()


@dataclass
class Setup:
    broker: BrokerThread
    route: str  # alice's package
    bob_job: dict  # type: ignore[type-arg]


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    root = new_root("route")
    try:
        with running_broker(root) as broker, broker.client() as alice:
            resp = alice.post(
                "/v1/packages",
                content=_zip("print('alice private code')"),
                headers={"Content-Type": "application/zip"},
            )
            assert resp.status_code == 201, resp.text
            route = f"/internal/v1/packages/{resp.json()['digest']}"
            with broker.client("bob") as bob:
                probe = (
                    "import json, urllib.request, urllib.error\n"
                    f"url = {broker.url + route!r}\n"
                    "try:\n"
                    "    urllib.request.urlopen(url, timeout=10)\n"
                    "    print(json.dumps(200))\n"
                    "except urllib.error.HTTPError as exc:\n"
                    "    print(json.dumps(exc.code))\n"
                    "except urllib.error.URLError:\n"  # its own network namespace
                    "    print(json.dumps('unreachable'))\n"
                )
                job = wait_job(bob, submit(bob, command=["python", "-c", probe]), timeout=120)
                job["stdout"] = bob.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
            yield Setup(broker, route, job)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _pod_secret(setup: Setup, pod: str) -> str:
    broker = setup.broker
    return broker.call(lambda: broker.embedded.broker.pods.records[pod].secret)


def test_no_credential_or_a_callers_token_is_refused(setup: Setup) -> None:
    with httpx.Client(base_url=setup.broker.url) as anon:
        for headers in ({}, {"Authorization": "Bearer not-a-secret"},
                        {"Authorization": f"Bearer {setup.broker.token}"}):  # fmt: skip
            resp = anon.get(setup.route, headers=headers)
            assert resp.status_code == 401
            assert (resp.json()["error"], resp.json()["field"]) == ("Unauthorized", "Authorization")


def test_a_job_inside_a_pod_cannot_fetch_another_callers_package(setup: Setup) -> None:
    job = setup.bob_job
    assert job["state"] == "SUCCEEDED", job
    # A pod with a network namespace of its own cannot even connect (test_hostile_network.py);
    # on the host's network the route refuses a job that has no pod secret.
    assert json.loads(job["stdout"].strip()) in (401, "unreachable")


def test_a_pod_fetches_with_its_own_secret(setup: Setup) -> None:
    pod = setup.bob_job["pods"][0]["name"]
    secret = _pod_secret(setup, pod)
    with httpx.Client(base_url=setup.broker.url) as agent:
        missing = agent.get(
            "/internal/v1/packages/sha256:" + "0" * 64,
            headers={"Authorization": f"Bearer {secret}"},
        )
        assert (missing.status_code, missing.json()["field"]) == (404, "digest")


def test_a_pod_of_one_caller_cannot_fetch_another_callers_package(setup: Setup) -> None:
    pod = setup.bob_job["pods"][0]["name"]  # bob's pod, alice's package
    secret = _pod_secret(setup, pod)
    with httpx.Client(base_url=setup.broker.url) as agent:
        resp = agent.get(setup.route, headers={"Authorization": f"Bearer {secret}"})
    assert resp.status_code in (401, 404)

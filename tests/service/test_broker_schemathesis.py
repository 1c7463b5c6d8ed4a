"""Property-based fuzzing of the whole served OpenAPI document of the running embedded broker
(the app `firepool serve` builds): the API, the pod list, progress reports and the internal
routes the pod agent calls (exit events, package fetch), each with its proper token.

No generated request may cause a 5xx; every answer matches the document; every 4xx has the one
typed error body {"error", "message", "field"} (plus "problems" for a rejected body). Its one
pool has a name no generator will guess, so a fuzzed job is refused or fails as an unknown pool
and no generated command runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, running_broker

EXAMPLES = 20
POOL = "fuzz-only-pool-3f9c2a71"
#: Every route of the served document, by (method, path): the test fails if one is missing,
#: so a new route is fuzzed (or this list is updated) on purpose.
EXPECTED = {
    ("GET", "/internal/v1/packages/{digest}"),
    ("POST", "/internal/v1/events"),
    ("GET", "/v1/pods"),
    ("POST", "/v1/jobs/{job_id}/progress"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{job_id}"),
    ("POST", "/v1/jobs/{job_id}/cancel"),
    ("GET", "/v1/jobs/{job_id}/logs"),
    ("POST", "/v1/packages"),
    ("GET", "/v1/pools"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[BrokerThread]:
    pool = cpu_pool(POOL, min_count=1, max_count=1, memory_mib_per_pod=256)
    with running_broker(tmp_path / "broker", catalog=Catalog((pool,), {"cpu": 2})) as handle:
        yield handle


def _pod_secret(broker: BrokerThread, timeout: float = 60.0) -> str:
    """The secret of the pool's one pod (its floor), once the broker has created it."""
    deadline = time.monotonic() + timeout
    while True:
        records = broker.call(lambda: dict(broker.embedded.broker.pods.records))
        if records:
            return next(iter(records.values())).secret
        assert time.monotonic() < deadline, "the floor pod was never created"
        time.sleep(0.05)


def test_no_generated_request_breaks_the_served_document(served: BrokerThread) -> None:
    caller = f"Bearer {served.token}"
    pod = f"Bearer {_pod_secret(served)}"
    # A stored package, so that fetches can also find one.
    upload = httpx.post(
        f"{served.url}/v1/packages",
        content=_zip(),
        headers={"Authorization": caller, "Content-Type": "application/zip"},
    )
    assert upload.status_code == 201, upload.text

    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    served_routes = {(op.method.upper(), op.path) for op in operations}
    assert served_routes >= EXPECTED, EXPECTED - served_routes
    failures: list[str] = []
    for operation in operations:
        bearer = pod if operation.path.startswith("/internal/") else caller
        try:
            _fuzz(operation, served.url, bearer)()
        except Exception as err:  # collect every operation's failure, then report them all
            failures.append(f"{operation.method.upper()} {operation.path}: {err}")
    if failures:
        pytest.fail("\n\n".join(failures))


def _fuzz(operation: Any, url: str, bearer: str) -> Callable[[], None]:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def run(case: schemathesis.Case) -> None:
        response = case.call(base_url=url, headers={"Authorization": bearer})
        case.validate_response(
            response,
            checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
        )
        if 400 <= response.status_code < 500:
            body = response.json()
            assert set(body) - {"problems"} == {"error", "message", "field"}, body
            for problem in body.get("problems", ()):  # a rejected body lists every problem
                assert set(problem) == {"error", "message", "field"}, body
            assert isinstance(body["error"], str) and body["error"], body
            assert isinstance(body["message"], str) and body["message"], body

    return run  # type: ignore[no-any-return]


def _zip() -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("main.py", "print('fuzz')\n")
    return buffer.getvalue()

"""Property-based fuzzing of the served OpenAPI document: no request may cause a 5xx, and
every answer must match the document (status and body schema).

Runs against the real server over HTTP with a valid token (unauthenticated requests only
reach the 401 path, which the bad-input tests already cover). Examples are bounded per
operation to keep the suite fast.
"""

from __future__ import annotations

import pytest
import schemathesis
from api_harness import Api
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

EXAMPLES = 25


def test_no_generated_request_breaks_the_server(api: Api) -> None:
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9
    token = api.alice.headers["Authorization"]
    failures: list[str] = []
    for operation in operations:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: schemathesis.Case) -> None:
            response = case.call(base_url=api.url, headers={"Authorization": token})
            case.validate_response(
                response,
                checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
            )

        try:
            run()
        except Exception as err:  # collect every operation's failure, then report them all
            failures.append(f"{operation.method.upper()} {operation.path}: {err}")
    if failures:
        pytest.fail("\n\n".join(failures))

"""Health, metrics, pools, the OpenAPI document and token caching."""

from __future__ import annotations

from api_harness import Api

from firepool.api.auth import TokenAuthenticator
from firepool.model import ErrorCode, JobErrorClass, UnauthorizedError
from firepool.store import SqlJobStore
from firepool.store.tokens import hash_token


def test_health_metrics_pools_and_openapi(api: Api) -> None:
    assert api.anonymous.get("/healthz").json() == {"status": "ok"}
    api.alice.post("/v1/jobs", json={"pool": "cpu", "command": ["x"]})
    metrics = api.anonymous.get("/metrics").text
    assert (
        'firepool_http_requests_total{method="POST",route="/v1/jobs",status="201"} 1.0' in metrics
    )
    assert "firepool_jobs_submitted_total 1.0" in metrics
    pools = api.alice.get("/v1/pools").json()["pools"]
    assert [p["name"] for p in pools] == ["cpu", "gpu"]
    document = api.anonymous.get("/openapi.json").json()
    assert {
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/cancel",
        "/v1/jobs/{job_id}/logs",
        "/v1/packages",
        "/v1/pools",
        "/healthz",
        "/metrics",
    } <= set(document["paths"])
    job_spec = document["components"]["schemas"]["JobSpec"]
    assert job_spec["additionalProperties"] is False
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert document["paths"]["/v1/jobs"]["post"]["security"] == [{"bearer": []}]
    schemas = document["components"]["schemas"]
    # a job's end class and a refusal's code are two enums: a caller switching on one never
    # sees the other's values
    assert set(schemas["JobErrorClass"]["enum"]) == {c.value for c in JobErrorClass}
    assert set(schemas["ErrorCode"]["enum"]) == {c.value for c in ErrorCode}
    assert "NotFound" not in schemas["JobErrorClass"]["enum"]
    assert "Timeout" not in schemas["ErrorCode"]["enum"]
    unknown = api.alice.get("/v2/nothing")
    assert unknown.status_code == 404 and unknown.json()["error"] == "NotFound"


def test_validation_is_cached_and_revocation_lands_after_the_ttl(api: Api) -> None:
    now = [0.0]
    auth = TokenAuthenticator(api.store, ttl=60.0, clock=lambda: now[0])
    token = "fp_cache-test"
    api.store.add_token("carol", hash_token(token), now=0.0)
    assert auth.lookup(f"Bearer {token}") == "carol"
    assert auth.lookup(f"Bearer {token}") == "carol"
    assert (auth.misses, auth.hits) == (1, 1)
    api.store.revoke_token(hash_token(token))
    assert auth.lookup(f"Bearer {token}") == "carol"  # still cached
    now[0] = 61.0
    try:
        auth.lookup(f"Bearer {token}")
    except UnauthorizedError:
        pass
    else:
        raise AssertionError("a revoked token must stop working after the TTL")


def test_token_hashes_only(api: Api) -> None:
    store: SqlJobStore = api.store
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT token_hash FROM tokens").all()
    assert all(len(r[0]) == 64 and not r[0].startswith("fp_") for r in rows)

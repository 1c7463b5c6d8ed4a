"""API failures become typed errors naming the field; throttling and 5xx are retried."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from kubernetes.client.exceptions import ApiException

from firepool.backends.kubernetes.errors import (
    ApiRejectedError,
    BackendError,
    ForbiddenError,
    PodConflictError,
    PodNotFoundError,
    from_status,
    map_exception,
    retry_after,
)
from firepool.backends.kubernetes.ratelimit import TokenBucket, backoff_delay, with_retries
from firepool.model import ErrorCode


def status_body(code: int, message: str, field: str | None = None) -> bytes:
    body: dict[str, object] = {"kind": "Status", "code": code, "message": message}
    if field:
        body["details"] = {"causes": [{"field": field, "message": "Required value"}]}
    return json.dumps(body).encode()


def test_validation_error_names_the_field() -> None:
    err = from_status(
        422, status_body(422, "Pod is invalid", "spec.containers[0].image"), "create pod"
    )
    assert isinstance(err, ApiRejectedError) and err.field == "spec.containers[0].image"
    assert err.code is ErrorCode.CONFIG and not err.retryable
    assert "create pod: Pod is invalid" in err.message


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (401, ForbiddenError, False),
        (403, ForbiddenError, False),
        (404, PodNotFoundError, False),
        (409, PodConflictError, False),
        (429, BackendError, True),
        (500, BackendError, True),
        (503, BackendError, True),
    ],
)
def test_status_mapping(status: int, kind: type[BackendError], retryable: bool) -> None:
    err = from_status(status, b"not json", "x")
    assert type(err) is kind and err.retryable is retryable and err.status == status


def test_client_exceptions_are_mapped() -> None:
    exc = ApiException(status=429, reason="Too Many Requests")
    exc.body = status_body(429, "slow down")
    exc.headers = {"Retry-After": "2"}
    err = map_exception(exc, "create pod")
    assert err.status == 429 and err.retryable and retry_after(err) == 2.0
    transport = map_exception(ConnectionResetError("reset"), "watch")
    assert transport.status is None and transport.retryable


def test_retries_throttling_then_succeeds() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise from_status(503, b"", "create pod")
        return "ok"

    result = asyncio.run(
        with_retries(flaky, "create pod", retries=5, base=0.001, cap=0.01, rng=random.Random(1))
    )
    assert result == "ok" and len(calls) == 3


def test_gives_up_after_retries_with_the_typed_error() -> None:
    async def down() -> str:
        raise ApiException(status=500, reason="boom")

    with pytest.raises(BackendError) as err:
        asyncio.run(with_retries(down, "delete pod", retries=2, base=0.001, cap=0.01))
    assert err.value.status == 500


def test_does_not_retry_a_rejection() -> None:
    calls: list[int] = []

    async def bad() -> str:
        calls.append(1)
        raise from_status(422, status_body(422, "bad", "metadata.name"), "create pod")

    with pytest.raises(ApiRejectedError):
        asyncio.run(with_retries(bad, "create pod", retries=5, base=0.001, cap=0.01))
    assert len(calls) == 1


def test_backoff_is_bounded_and_grows() -> None:
    rng = random.Random(0)
    assert all(backoff_delay(a, 0.2, 10.0, rng) <= min(10.0, 0.2 * 2**a) for a in range(12))


def test_token_bucket_paces_at_qps() -> None:
    now = [0.0]
    bucket = TokenBucket(100, 10, clock=lambda: now[0])
    assert all(bucket.try_take() == 0 for _ in range(10))  # the burst
    wait = bucket.try_take()
    assert wait == pytest.approx(0.01)
    now[0] += 0.5  # half a second refills 50 tokens, capped at the burst of 10
    assert sum(1 for _ in range(20) if bucket.try_take() == 0) == 10


def test_token_bucket_rate_in_real_time() -> None:
    async def go() -> float:
        bucket = TokenBucket(200, 1)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(41):
            await bucket.acquire()
        return loop.time() - start

    elapsed = asyncio.run(go())
    assert 0.18 <= elapsed < 1.0  # 40 tokens at 200/s after the first


def test_token_bucket_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 1)

"""API errors come back as the typed exceptions of `firepool.model`, with the HTTP status."""

from __future__ import annotations

import pytest

from firepool.client import Client, WaitTimeoutError, problems_of, status_of
from firepool.client.errors import ERROR_CLASSES, error_from_body
from firepool.model import (
    ConflictError,
    ErrorCode,
    FirepoolError,
    ForbiddenEnvError,
    NotFoundError,
    RequestValidationError,
    UnauthorizedError,
    UnavailableError,
    UnknownPoolError,
)
from firepool.testing.broker import LiveBroker


def test_unknown_field_is_a_validation_error_naming_it(client: Client) -> None:
    with pytest.raises(RequestValidationError) as caught:
        client.submit_spec({"pool": "cpu", "command": ["x"], "lease_tga": "s1"})
    assert caught.value.field == "lease_tga" and "lease_tga" in caught.value.message
    assert caught.value.code == ErrorCode.VALIDATION and status_of(caught.value) == 422


def test_every_problem_comes_back_typed(client: Client) -> None:
    spec = {"pool": "cpu", "comand": ["x"], "pods": 0, "env": {"LD_PRELOAD": "evil.so"}}
    with pytest.raises(ForbiddenEnvError) as caught:  # the most specific class heads the list
        client.submit_spec(spec)
    assert caught.value.field == "env.LD_PRELOAD" and status_of(caught.value) == 422
    problems = {p.field: p for p in problems_of(caught.value)}
    assert set(problems) == {"command", "comand", "pods", "env.LD_PRELOAD"}
    assert isinstance(problems["comand"], RequestValidationError)
    assert problems["comand"].message == "unknown field 'comand'; did you mean 'command'?"
    assert isinstance(problems["env.LD_PRELOAD"], ForbiddenEnvError)
    assert all(status_of(p) == 422 for p in problems.values())
    with pytest.raises(NotFoundError) as single:
        client.get("no-such-job")
    assert problems_of(single.value) == [single.value]


def test_bad_token_is_unauthorized(broker: LiveBroker) -> None:
    with Client(broker.url, "fp_not-a-token") as stranger, pytest.raises(UnauthorizedError) as err:
        stranger.list()
    assert status_of(err.value) == 401 and err.value.field == "Authorization"


def test_someone_elses_job_is_not_found(client: Client, broker: LiveBroker) -> None:
    with Client(broker.url, broker.tokens["bob"]) as bob:
        theirs = bob.submit("cpu", ["x"])
    for attempt in (client.get, client.cancel, lambda job_id: list(client.logs(job_id))):
        with pytest.raises(NotFoundError) as caught:
            attempt(theirs.id)
        assert status_of(caught.value) == 404 and caught.value.field == "id"


def test_refusals_keep_their_class(client: Client) -> None:
    with pytest.raises(UnknownPoolError) as pool:
        client.submit("tpu", ["x"])
    assert pool.value.field == "pool"
    with pytest.raises(ForbiddenEnvError) as env:
        client.submit("cpu", ["x"], env={"LD_PRELOAD": "evil.so"})
    assert env.value.field == "env.LD_PRELOAD"
    client.submit("cpu", ["x"], request_id="once")
    with pytest.raises(ConflictError):
        client.submit("cpu", ["y"], request_id="once")
    with pytest.raises(RequestValidationError) as bad:
        client.submit("cpu", ["x"], pods=99)
    assert bad.value.field == "pods"


def test_unreachable_broker_is_unavailable() -> None:
    with (
        Client("http://127.0.0.1:9", "t", timeout=2) as nowhere,
        pytest.raises(UnavailableError) as caught,
    ):
        nowhere.pools()
    assert status_of(caught.value) is None and "127.0.0.1:9" in caught.value.message


def test_wait_timeout_leaves_the_job_alone(client: Client) -> None:
    job = client.submit("cpu", ["x"])
    with pytest.raises(WaitTimeoutError) as caught:
        client.wait(job.id, timeout=0.2)
    assert caught.value.state == "QUEUED" and isinstance(caught.value, TimeoutError)
    assert client.get(job.id).state.value == "QUEUED"


def test_mapping_covers_every_typed_error() -> None:
    def subclasses(cls: type[FirepoolError]) -> list[type[FirepoolError]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    own = "firepool.model.errors"
    typed = {cls.code for cls in subclasses(FirepoolError) if cls.__module__ == own}
    assert typed == set(ERROR_CLASSES)
    assert all(ERROR_CLASSES[code].code == code for code in ERROR_CLASSES)
    odd = error_from_body(500, {"error": "SomethingNew", "message": "later", "field": None})
    assert type(odd) is FirepoolError and "SomethingNew" in odd.message
    proxy = error_from_body(502, "<html>bad gateway</html>")
    assert isinstance(proxy, UnavailableError) and status_of(proxy) == 502

"""The SDK and the served API agree: every route the SDK calls exists with its method, query
parameters and answer model, and the SDK's submission fields are exactly the request schema's
properties. An API change that the SDK does not follow fails here, not in a user's program.
Checked against the whole broker's document (the pod list is a service route)."""

from __future__ import annotations

import inspect
from typing import Any, get_type_hints

import httpx
import pytest

from firepool.client import AsyncClient, Client, SubmitOptions
from firepool.client.calls import ROUTES, Route
from firepool.model import JobSpec
from firepool.testing.service import BrokerThread


@pytest.fixture(scope="module")
def openapi(embedded: BrokerThread) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(f"{embedded.url}/openapi.json", timeout=30).json()
    return document


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    resolved: dict[str, Any] = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return resolved


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_route_exists_as_the_sdk_calls_it(openapi: dict[str, Any], name: str) -> None:
    route: Route = ROUTES[name]
    assert route.path in openapi["paths"], f"{name}: {route.path} is not served"
    operation = openapi["paths"][route.path].get(route.method.lower())
    assert operation is not None, f"{name}: {route.method} {route.path} is not served"
    query = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "query"}
    assert query == set(route.query), name
    body = operation.get("requestBody", {}).get("content", {})
    if route.body is not None:
        schema = _resolve(openapi, body["application/json"]["schema"])
        assert set(schema["properties"]) == set(route.body.model_fields)
    elif route.raw_body:
        assert "application/zip" in body
    else:
        assert not body, f"{name}: the API now takes a body the SDK does not send"
    assert route.result is not None
    answers = [
        operation["responses"][status]["content"]["application/json"]["schema"]
        for status in ("200", "201")
        if status in operation["responses"]
    ]
    assert answers, name
    for answer in answers:
        schema = _resolve(openapi, answer)
        assert set(schema["properties"]) == set(route.result.model_fields), name


def test_submit_fields_are_the_request_schema(openapi: dict[str, Any]) -> None:
    operation = openapi["paths"]["/v1/jobs"]["post"]
    schema = _resolve(openapi, operation["requestBody"]["content"]["application/json"]["schema"])
    sdk_fields = {"pool", "command", *get_type_hints(SubmitOptions)}
    assert sdk_fields == set(schema["properties"]) == set(JobSpec.model_fields)
    assert set(schema["required"]) == {"pool", "command"}


def test_sync_and_async_clients_have_the_same_api() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")
        }

    sync, aio = public(Client), public(AsyncClient)
    assert set(sync) == set(aio)
    for name in sync:
        assert sync[name].parameters == aio[name].parameters, name
        returns = str(aio[name].return_annotation).replace("AsyncIterator", "Iterator")
        assert str(sync[name].return_annotation) == returns.replace("AsyncClient", "Client"), name
        member = getattr(AsyncClient, name)
        if name != "session":
            assert inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member), name

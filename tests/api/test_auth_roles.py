"""Token roles: a caller token on an admin route gets a typed 403 and changes nothing; an admin
token passes. (`PUT /v1/pools/{name}` is guarded by the same `require_admin`; the pod view per
role is tested on real pods in tests/service/test_broker_end_to_end.py.)"""

from __future__ import annotations

import httpx
from api_harness import Api
from fastapi import APIRouter

from firepool.api import issue_token
from firepool.api.auth import TokenAuthenticator
from firepool.api.context import AdminSession
from firepool.model import Principal, TokenRole
from firepool.store.tokens import hash_token


def _mount_admin_route(api: Api, changes: list[str]) -> None:
    """An admin route on the served app that records every change it makes."""
    router = APIRouter()

    @router.post("/v1/admin-probe")
    async def probe(session: AdminSession) -> dict[str, str]:
        changes.append(session.caller)
        return {"changed_by": session.caller}

    assert api.app is not None
    api.app.include_router(router)


def test_a_caller_token_on_an_admin_route_is_refused_and_changes_nothing(api: Api) -> None:
    changes: list[str] = []
    _mount_admin_route(api, changes)
    refused = api.alice.post("/v1/admin-probe")
    assert refused.status_code == 403
    body = refused.json()
    assert (body["error"], body["field"]) == ("Forbidden", "Authorization")
    assert "admin" in body["message"] and "'alice'" in body["message"]
    assert changes == []
    assert api.anonymous.post("/v1/admin-probe").status_code == 401
    assert changes == []
    token = issue_token(api.store, "root", role=TokenRole.ADMIN)
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token}"}) as root:
        accepted = root.post("/v1/admin-probe")
        assert accepted.status_code == 200 and accepted.json() == {"changed_by": "root"}
        assert changes == ["root"]
        # An admin is a caller too: it submits jobs of its own.
        assert root.post("/v1/jobs", json={"pool": "cpu", "command": ["x"]}).status_code == 201


def test_the_role_is_cached_with_the_caller(api: Api) -> None:
    now = [0.0]
    auth = TokenAuthenticator(api.store, ttl=60.0, clock=lambda: now[0])
    api.store.add_token("root", hash_token("fp_admin"), now=0.0, role=TokenRole.ADMIN)
    api.store.add_token("carol", hash_token("fp_carol"), now=0.0)
    assert auth.principal("Bearer fp_admin") == Principal("root", TokenRole.ADMIN)
    assert auth.principal("Bearer fp_admin").admin
    assert auth.cached("Bearer fp_admin") == Principal("root", TokenRole.ADMIN)
    assert auth.principal("Bearer fp_carol") == Principal("carol", TokenRole.CALLER)
    assert (auth.misses, auth.hits) == (2, 2)

"""`/v1/pools` on an API with no broker behind it: the list carries no rollouts, and a pool
edit is refused (403 for a caller, 503 Unavailable for an admin) with nothing changed. The
edit through a whole broker is tested on real pods in tests/service/test_pool_edits_rollout.py."""

from __future__ import annotations

import httpx
from api_harness import Api

from firepool.api import issue_token
from firepool.model import TokenRole


def test_without_a_broker_a_pool_edit_is_refused_and_changes_nothing(api: Api) -> None:
    listed = api.alice.get("/v1/pools").json()
    assert listed["rollouts"] == []
    (cpu,) = [p for p in listed["pools"] if p["name"] == "cpu"]
    edited = {**cpu, "template_version": cpu["template_version"] + 1}
    refused = api.alice.put("/v1/pools/cpu", json=edited)
    assert (refused.status_code, refused.json()["error"]) == (403, "Forbidden")
    token = issue_token(api.store, "root", role=TokenRole.ADMIN)
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token}"}) as root:
        answer = root.put("/v1/pools/cpu", json=edited)
        assert (answer.status_code, answer.json()["error"]) == (503, "Unavailable")
    assert api.alice.get("/v1/pools").json() == listed

"""The dashboard at `/` over a real broker: the shell is public and empty, the token unlocks
the panel, and the panel shows pools, pods, the queue and the caller's own recent jobs."""

from __future__ import annotations

import httpx

from firepool.api.schemas import PodView
from firepool.dashboard.page import PanelData, panel, percentile
from firepool.model import PoolSpec, PoolStats
from firepool.testing.service import BrokerThread, run


def test_the_shell_is_public_and_holds_no_data(broker: BrokerThread) -> None:
    client = broker.client()
    job = run(client, command=["python", "-c", "pass"])
    page = httpx.get(f"{broker.url}/", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "API token" in page.text and "/dashboard/panel" in page.text
    assert job["id"] not in page.text and "Bearer " + broker.token not in page.text
    refused = httpx.get(f"{broker.url}/dashboard/panel", timeout=30)
    assert refused.status_code == 401 and refused.json()["error"] == "Unauthorized"
    document = httpx.get(f"{broker.url}/openapi.json", timeout=30).json()
    assert "/" not in document["paths"] and "/dashboard/panel" not in document["paths"]


def test_the_panel_shows_pools_pods_queue_and_own_jobs(broker: BrokerThread) -> None:
    client = broker.client()
    done = run(client, command=["python", "-c", "pass"], lease_tag="dash")
    failed = run(client, command=["python", "-c", "raise SystemExit(4)"], lease_tag="dash")
    text = client.get("/dashboard/panel").raise_for_status().text
    pod = done["pods"][0]
    assert "id='pools'" in text and "<td>cpu</td>" in text and "1 / 1 / 4" in text
    assert f"<td>{pod['name']}</td>" in text  # the pods table
    assert "<td>dash</td>" in text  # the caller sees its own pod's session
    assert "job(s) queued across every pool" in text
    assert done["id"] in text and failed["id"] in text
    assert text.index(failed["id"]) < text.index(done["id"])  # newest first
    assert f"{pod['acquisition']} ({pod['reason']})" in text
    assert "NonZeroExit" in text and "<td>4</td>" in text
    assert "p50 -" not in text  # start latency percentiles come from the jobs shown

    other = broker.client("someone-else")
    theirs = other.get("/dashboard/panel").raise_for_status().text
    assert done["id"] not in theirs and failed["id"] not in theirs
    assert "<td>dash</td>" not in theirs  # another caller's session stays hidden
    assert f"<td>{pod['name']}</td>" in theirs  # but the pod itself is capacity everyone sees


def test_values_are_escaped_and_percentiles_are_nearest_rank() -> None:
    data = PanelData(
        caller="<script>alert(1)</script>",
        now=100.0,
        pools=[PoolSpec(name="cpu")],
        stats=[PoolStats("cpu", 0, 0, 8, {("active", "running"): 1}, 5.0, 0.0, 2, "cpu", 1, None)],
        pods=[
            PodView(
                name="cpu-1",
                pool="cpu",
                role="active",
                state="running",
                owner="<img src=x onerror=alert(1)>",
                created_at=90.0,
            )
        ],
        jobs=[],
    )
    text = panel(data)
    assert "<script>" not in text and "<img" not in text
    assert "&lt;script&gt;" in text and "<span class='queued'>2</span>" in text
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 99) == 4.0

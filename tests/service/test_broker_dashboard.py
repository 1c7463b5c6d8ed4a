"""The dashboard at `/` over a real broker: the shell is public and empty, the token unlocks
the panel, and the panel shows pools, pods, the queue and the caller's own recent jobs."""

from __future__ import annotations

import random

import httpx

from firepool.api.schemas import PodView
from firepool.control.elastic_jobs import ElasticRules
from firepool.dashboard.page import PanelData, chart, charts, elastic_table, panel, percentile
from firepool.model import ElasticSpec, PoolStats
from firepool.service.telemetry import Timeline
from firepool.sim.broker import JobRequest, SimBroker
from firepool.sim.experiments.shared_pool import POOL
from firepool.sim.loop import EventLoop
from firepool.sim.venue import load_venue
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, run, settled


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
        pools=[cpu_pool()],
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


def test_the_timeline_summarises_each_interval_and_the_chart_draws_it() -> None:
    timeline = Timeline(keep=3)
    for latency in (0.3, 0.1, 0.2):
        timeline.started(latency)
    first = timeline.sample(10.0, held=4, busy=1)
    assert (first.starts, first.start_p50, first.start_p99) == (3, 0.2, 0.3)
    empty = timeline.sample(20.0, held=4, busy=3)
    assert empty.starts == 0 and empty.start_p50 is None  # only the interval's jobs count
    timeline.sample(30.0, held=2, busy=2)
    timeline.sample(40.0, held=1, busy=0)
    assert [p.at for p in timeline.points] == [20.0, 30.0, 40.0]  # bounded, oldest dropped

    svg = charts(list(timeline.points))
    assert svg.count("<polyline class='s-held'") == 1 and "4 pods" in svg
    assert "s-p50" not in svg.split("latency-chart")[1].split("</svg>")[0].split("<text")[0]
    assert "collecting samples" in chart("c", [("s-busy", [(1.0, 2.0)])], unit=" pods")
    gap = chart("g", [("s-p50", [(0.0, 1.0), (1.0, 2.0), (2.0, None), (3.0, 1.0)])], unit="s")
    assert gap.count("<polyline") == 1 and gap.count("<circle") == 1  # None breaks the line


def test_elastic_rounds_are_recorded_and_only_own_jobs_are_named() -> None:
    loop = EventLoop()
    broker = SimBroker(loop, load_venue("production-cpu"), [POOL], {"cpu": POOL.max_count},
                       random.Random("venue/0"), elastic=ElasticRules(policy="oak"))  # fmt: skip
    broker.warm_up()
    spec = ElasticSpec(app="cifar10", min_pods=1, max_pods=POOL.max_count)
    ids = [broker.submit(JobRequest(f"t-{i}", POOL.name, 1800.0, elastic=spec)) for i in range(2)]
    elastic = broker.core.elastic
    assert elastic is not None
    loop.run(until=loop.now + 400.0, stop=lambda: len(elastic.allocations) >= 3)
    rounds = list(elastic.allocations)
    assert len(rounds) >= 3 and [r.round for r in rounds] == sorted(r.round for r in rounds)
    for r in rounds:
        assert set(r.pods) == set(ids) and r.policy == "oak"
        assert 0 < sum(r.pods.values()) <= POOL.max_count

    text = elastic_table(rounds, frozenset({ids[0]}))
    assert f"<td>{ids[0]}</td>" in text and ids[1] not in text
    last = rounds[-1]
    assert f"<th>round {last.round}</th>" in text and "other callers" in text
    row = text.split("other callers")[1].split("</tr>")[0]
    assert f"<td>{last.pods[ids[1]]}</td></tr>" in row + "</tr>"


def test_the_panel_plots_the_brokers_samples(broker: BrokerThread) -> None:
    client = broker.client()
    core = broker.embedded.broker
    broker.call(core.sample_timeline)
    job = run(client, command=["python", "-c", "pass"], lease_tag="plot")
    settled(broker, job["pods"][0]["name"])  # its start latency is noted once its pod is reset
    broker.call(core.sample_timeline)
    text = client.get("/dashboard/panel").raise_for_status().text
    assert "id='capacity-chart'" in text and "<polyline class='s-held'" in text
    assert "<polyline class='s-p50'" in text or "<circle class='s-p50'" in text
    assert "id='elastic'" in text  # the table is there, empty without elastic jobs

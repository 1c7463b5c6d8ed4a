"""`firepool top` against a real broker: a few refreshes, non-interactive (stdout is not a
terminal, so each refresh is printed in full)."""

from __future__ import annotations

import httpx
from cli_harness import Invoke

from firepool.cli.top import bar, queue_depths
from firepool.client import Client
from firepool.testing.broker import LiveBroker
from firepool.testing.service import BrokerThread, run


def test_top_shows_pools_pods_and_queue_depth_for_a_few_refreshes(
    cli_e2e: Invoke, embedded: BrokerThread
) -> None:
    client = embedded.client()
    done = run(client, command=["python", "-c", "pass"], lease_tag="top")
    pod = done["pods"][0]["name"]
    result = cli_e2e("top", "--iterations", "3", "--interval", "0.1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert [f"refresh {n}" in out for n in (1, 2, 3)] == [True, True, True]
    assert "refresh 4" not in out
    assert out.count("POOL") >= 3 and pod in out and "top" in out  # the pod and its session
    depths = queue_depths(httpx.get(f"{embedded.url}/metrics", timeout=30).text)
    assert depths is not None and "cpu" in depths
    assert f"queue: {sum(depths.values())} job(s) queued" in out


def test_top_once_lists_the_callers_queued_jobs(cli: Invoke, broker: LiveBroker) -> None:
    with Client(broker.url, broker.tokens["alice"]) as client:
        queued = client.submit("cpu", ["a"], queue="batch", lease_tag="s9")
    result = cli("top", "--once")
    assert result.exit_code == 0, result.output
    assert "refresh 1" in result.stdout and "refresh 2" not in result.stdout
    line = next(x for x in result.stdout.splitlines() if queued.id in x)
    assert "batch" in line and "s9" in line
    assert "queue: - job(s)" in result.stdout  # an API-only broker publishes no depth


def test_top_refuses_a_bad_interval(cli: Invoke) -> None:
    result = cli("top", "--interval", "0")
    assert result.exit_code == 2 and "--interval" in result.output


def test_the_capacity_bar_and_the_metrics_parser() -> None:
    assert bar(held=2, busy=1, ceiling=4, width=8) == "##++...."
    assert bar(held=0, busy=0, ceiling=0, width=4) == "...."
    text = (
        "# TYPE firepool_queue_depth gauge\n"
        'firepool_queue_depth{pool="cpu"} 3.0\nfirepool_queue_depth{pool="gpu"} 0.0\n'
    )
    assert queue_depths(text) == {"cpu": 3, "gpu": 0}
    assert queue_depths("firepool_jobs_submitted_total 1.0\n") is None

"""`firepool jobs | pods | pools | cancel | logs` over real HTTP."""

from __future__ import annotations

import json
import threading
import time

from cli_harness import Invoke, invoker

from firepool.client import Client
from firepool.testing.broker import LiveBroker
from firepool.testing.service import BrokerThread


def test_jobs_table_filters_and_json(cli: Invoke, broker: LiveBroker) -> None:
    with Client(broker.url, broker.tokens["alice"]) as client:
        cpu = client.submit("cpu", ["a"], lease_tag="s1")
        gpu = client.submit("gpu", ["b"], queue="train")
    broker.finish(cpu.id, exit_code=0)
    table = cli("jobs")
    assert table.exit_code == 0, table.output
    assert cpu.id in table.stdout and gpu.id in table.stdout and "SUCCEEDED" in table.stdout
    assert "cpu-0 (warm)" in table.stdout and "train" in table.stdout
    only = cli("jobs", "--state", "queued", "--pool", "gpu")
    assert gpu.id in only.stdout and cpu.id not in only.stdout
    listed = json.loads(cli("jobs", "--json").stdout)
    assert [j["id"] for j in listed] == [cpu.id, gpu.id] and listed[0]["exit_code"] == 0


def test_cancel_and_logs(cli: Invoke, broker: LiveBroker) -> None:
    with Client(broker.url, broker.tokens["alice"]) as client:
        queued = client.submit("cpu", ["a"])
        running = client.submit("cpu", ["b"])
    broker.start(running.id)
    result = cli("cancel", queued.id, running.id)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"{queued.id}: CANCELLED",
        f"{running.id}: cancel requested (RUNNING)",
    ]
    broker.log(running.id, "hello\n")
    assert cli("logs", running.id).stdout == "hello\n"

    def finish() -> None:
        time.sleep(0.3)
        broker.log(running.id, "bye\n")
        broker.finish(running.id)

    worker = threading.Thread(target=finish)
    worker.start()
    followed = cli("logs", "--follow", running.id)
    worker.join()
    assert followed.exit_code == 0 and followed.stdout == "hello\nbye\n"


def test_errors_are_one_line(cli: Invoke, broker: LiveBroker) -> None:
    with Client(broker.url, broker.tokens["bob"]) as bob:
        theirs = bob.submit("cpu", ["x"]).id
    missing = cli("logs", theirs)
    assert missing.exit_code == 1 and missing.stderr.startswith("error: NotFound:")
    stranger = invoker(broker.url, "fp_wrong")("jobs")
    assert stranger.exit_code == 1 and "Unauthorized" in stranger.stderr
    assert "Traceback" not in stranger.output


def test_pools_table(cli: Invoke) -> None:
    result = cli("pools")
    assert result.exit_code == 0
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert set(rows) == {"cpu", "gpu"} and "1x fake" in rows["gpu"]
    assert [p["name"] for p in json.loads(cli("pools", "--json").stdout)] == ["cpu", "gpu"]


def test_pods_table(cli_e2e: Invoke, embedded: BrokerThread) -> None:
    with Client(embedded.url, embedded.token) as client:
        names = {p.name for p in client.pods()}
    result = cli_e2e("pods")
    assert result.exit_code == 0 and result.stdout.split()[:4] == ["NAME", "POOL", "ROLE", "STATE"]
    assert names and names <= set(result.stdout.split())

"""`firepool jobs | pods | pools | cancel | logs` over real HTTP."""

from __future__ import annotations

import json
import threading
import time

from cli_harness import Invoke, invoker
from rich.console import Console
from typer.testing import CliRunner, Result

from firepool.api.schemas import PodView
from firepool.cli.main import app
from firepool.cli.tables import pods_table
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
    deadline = time.monotonic() + 60
    while True:  # the isolation facts come from each pod's agent once it is ready
        listed = json.loads(cli_e2e("pods", "--json").stdout)
        if listed and all(p["pid_namespace"] is not None for p in listed):
            break
        assert time.monotonic() < deadline, listed
        time.sleep(0.1)
    table = cli_e2e("pods").stdout
    for pod in listed:
        assert pod["pid_namespace"] is (pod["isolation"] == "private"), pod
        assert pod["isolation"] + ("+pid-ns" if pod["pid_namespace"] else "") in table


def narrow_cli(broker: LiveBroker) -> Invoke:
    """As `cli`, but as if in an 40-column terminal whose output goes to a pipe."""
    runner = CliRunner()
    env = {
        "FIREPOOL_URL": broker.url,
        "FIREPOOL_TOKEN": broker.tokens["alice"],
        "COLUMNS": "40",
        "NO_COLOR": "1",
    }

    def invoke(*args: str) -> Result:
        return runner.invoke(app, list(args), env=env, catch_exceptions=False)

    return invoke


def test_piped_tables_never_cut_ids_or_states(broker: LiveBroker) -> None:
    cli = narrow_cli(broker)
    with Client(broker.url, broker.tokens["alice"]) as client:
        done = client.submit("cpu", ["a"], lease_tag="a-rather-long-session-tag")
        queued = client.submit("cpu", ["b"], queue="a-long-queue-name")
    broker.finish(done.id, exit_code=0)
    result = cli("jobs")
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows[done.id][1] == "SUCCEEDED" and rows[queued.id][1] == "QUEUED"
    assert "a-rather-long-session-tag" in rows[done.id]
    pods = cli("pods")  # the API-only broker tracks none: the header alone, uncut
    assert pods.exit_code == 0 and "…" not in pods.stdout
    pools = cli("pools")
    assert "…" not in pools.stdout and pools.stdout.split()[:2] == ["NAME", "SHAPE"]


def test_every_list_command_takes_output(cli: Invoke, broker: LiveBroker) -> None:
    with Client(broker.url, broker.tokens["alice"]) as client:
        job = client.submit("cpu", ["a"])
    broker.finish(job.id, exit_code=0)
    for command in ("jobs", "pods", "pools"):
        table = cli(command, "--output", "table")
        wide = cli(command, "-o", "wide")
        listed = cli(command, "-o", "json")
        assert table.exit_code == wide.exit_code == listed.exit_code == 0
        assert isinstance(json.loads(listed.stdout), list)
        narrow_header = table.stdout.splitlines()[0].split()
        wide_header = wide.stdout.splitlines()[0].split()
        assert len(wide_header) > len(narrow_header), command
        assert set(narrow_header) <= set(wide_header)
    wide_jobs = cli("jobs", "-o", "wide").stdout
    assert "WAITED" in wide_jobs and "(warm: " in wide_jobs  # acquisition with its reason
    assert "STEP" in cli("pools", "-o", "wide").stdout
    assert json.loads(cli("jobs", "--output", "JSON").stdout)[0]["id"] == job.id


def test_an_unknown_output_format_is_refused(cli: Invoke) -> None:
    result = cli("jobs", "--output", "xml")
    assert result.exit_code == 2 and "xml" in result.output


def test_a_narrow_terminal_wraps_other_columns_not_names_or_states() -> None:
    pods = [
        PodView(name="cpu-0123456789abcdef", pool="cpu", role="active", state="retiring",
                owner="someone-with-a-long-name", created_at=0.0)
    ]  # fmt: skip
    console = Console(width=40, force_terminal=True, no_color=True, record=True)
    console.print(pods_table(pods, now=10.0, wide=True))
    words = console.export_text().split()
    assert "cpu-0123456789abcdef" in words and "retiring" in words

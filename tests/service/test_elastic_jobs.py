"""Elastic training jobs under the real broker: rounds size them, a resize is a graceful stop
and a new attempt at the new world size, progress reports end the restore, failures kill
every rank, and bad reports or impossible jobs get typed errors."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from firepool.agent import procfs
from firepool.agent.zygote import SPARE_NAME
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.service.elastic import ElasticConfig
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job

JOB = [sys.executable, "-m", "firepool.testing.elastic_job"]


def config(**elastic: Any) -> BrokerConfig:
    options: dict[str, Any] = {"policy": "sia", "round_s": 30.0, "tick_s": 0.05}
    options.update(elastic)
    return BrokerConfig(
        dispatch_tick_s=1.0,
        reconcile_s=1.0,
        hold_tick_s=0.2,
        exit_poll_s=0.5,
        elastic=ElasticConfig(**options),
    )


def slots(count: int = 2) -> Catalog:
    pool = cpu_pool(
        "slots",
        min_count=count,
        max_idle_count=count,
        max_count=count,
        idle_timeout=60.0,
        memory_mib_per_pod=512,
        step=count,
        network="host",  # a job's ranks rendezvous over TCP between pods
    )
    return Catalog((pool,), {"cpu": count})


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    with running_broker(tmp_path / "broker", catalog=slots(), config=config()) as handle:
        yield handle


def elastic_job(client: httpx.Client, steps: int, *, low: int = 1, high: int = 2,
                **extra: Any) -> str:
    return submit(
        client,
        pool="slots",
        command=[*JOB, str(steps)],
        kind="elastic",
        elastic={"app": "cifar10", "min_pods": low, "max_pods": high},
        **extra,
    )


def attempts_log(broker: BrokerThread, job_id: str) -> list[tuple[str, int, int, int]]:
    path = broker.embedded.data_dir / "checkpoints" / job_id / "attempts.log"
    rows = []
    for line in path.read_text().splitlines():
        attempt, world, rank, step = line.split()
        rows.append((attempt, int(world), int(rank), int(step)))
    return rows


def on_loop(broker: BrokerThread, fn: Any) -> Any:
    """The driver belongs to the broker's event loop: read it there."""
    return broker.call(fn)


def times(broker: BrokerThread, job_id: str) -> Any:
    driver = broker.embedded.broker.elastic
    return on_loop(broker, lambda: driver.times(job_id, time.time()))


def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


def test_an_arrival_resizes_the_running_job_through_a_checkpoint(tmp_path: Path) -> None:
    # DRF shares the two slots one each once a second job arrives; OAK and Sia would rather
    # preempt (a job is admitted only when its utility beats mu_na), see the next test.
    with running_broker(tmp_path / "b", catalog=slots(), config=config(policy="drf")) as broker:
        _resize(broker)


def _resize(broker: BrokerThread) -> None:
    client = broker.client()
    first = elastic_job(client, steps=80)
    # The first attempt takes both slots and reports progress (the restore is over).
    wait_for(lambda: times(broker, first).t_progress > 0.3)
    assert times(broker, first).configuration.replicas == 2
    second = elastic_job(client, steps=20)

    done_second = wait_job(client, second, timeout=60)
    done_first = wait_job(client, first, timeout=60)
    assert done_first["state"] == "SUCCEEDED" and done_second["state"] == "SUCCEEDED"

    log = attempts_log(broker, first)
    worlds = [world for attempt, world, rank, _ in log if rank == 0]
    assert worlds[0] == 2 and 1 in worlds[1:], log
    resumed = [step for attempt, world, rank, step in log if rank == 0][1]
    assert resumed > 0, "the second attempt must resume from the checkpoint, not from zero"
    history = client.get(f"/v1/jobs/{first}").json()
    assert history["attempt"].endswith(f":{len(worlds) - 1}")
    assert times(broker, first).restarts >= 1
    attempts = broker.call(lambda: broker.embedded.store.attempts(first))
    assert attempts[0].error_class is not None and attempts[0].error_class.value == "Preempted"


def test_sia_preempts_the_running_attempt_for_an_arrival_and_resumes_it_later(
        broker: BrokerThread) -> None:
    client = broker.client()
    first = elastic_job(client, steps=80)
    wait_for(lambda: times(broker, first).t_progress > 0.3)
    second = elastic_job(client, steps=10)
    assert wait_job(client, second, timeout=60)["state"] == "SUCCEEDED"
    assert wait_job(client, first, timeout=60)["state"] == "SUCCEEDED"
    store = broker.embedded.store
    mine = broker.call(lambda: store.attempts(first))
    theirs = broker.call(lambda: store.attempts(second))
    # The broker ended the first job's running attempt (not the job itself, not a failure)...
    stopped = mine[0]
    assert stopped.error_class is not None and stopped.error_class.value == "Preempted"
    assert stopped.finished_at is not None
    # ...and the arrival started only after that, on a slot the preempted attempt held:
    # with both slots taken, the preemption is what let it run.
    taken = {b.pod for b in stopped.pods} & {b.pod for b in theirs[0].pods}
    assert len(stopped.pods) == 2 and taken, (stopped.pods, theirs[0].pods)
    assert theirs[0].started_at is not None and theirs[0].started_at >= stopped.finished_at
    # The first job went on in a later attempt, from its checkpoint.
    assert len(mine) >= 2 and mine[-1].state.value == "SUCCEEDED"
    starts = [step for _, _, rank, step in attempts_log(broker, first) if rank == 0]
    assert len(starts) >= 2 and starts[1] > 0, starts


def test_a_job_no_size_of_which_fits_is_unschedulable(broker: BrokerThread) -> None:
    client = broker.client()
    job = wait_job(client, elastic_job(client, steps=5, low=3, high=4), timeout=30)
    assert job["state"] == "FAILED"
    assert job["error_class"] == "Unschedulable"
    assert "elastic" in job["message"]


def _rank_processes() -> set[int]:
    """PIDs of the job processes under this test's pod agents: each agent forks a zygote,
    which forks one process per rank it runs (and, while its pod is idle, a spare child that
    waits for the next job under its own name)."""
    procs = procfs.snapshot()
    agents = [pid for pid in procfs.descendants(procs, [os.getpid()])
              if b"firepool.agent\0" in _cmdline(pid)]
    zygotes = [pid for pid, p in procs.items() if p.ppid in agents]
    return {pid for pid in procfs.descendants(procs, zygotes)
            if not procs[pid].dead and _comm(pid) != SPARE_NAME}


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")
    except OSError:
        return ""


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_an_injected_failure_kills_every_rank_and_the_job_resumes(tmp_path: Path) -> None:
    with running_broker(tmp_path / "b", catalog=slots(), config=config(
        failure_rate=0.0, failure_seed=1, round_s=1.0,
    )) as broker:
        client = broker.client()
        # 200 steps of 0.05 s: a rank that survived the kill would run on for seconds.
        job_id = elastic_job(client, steps=200, max_retries=100)
        driver = broker.embedded.broker.elastic
        store = broker.embedded.store
        wait_for(lambda: times(broker, job_id).t_progress > 0.3)
        rounds = broker.embedded.broker.core.elastic
        assert rounds is not None
        live = on_loop(broker, lambda: rounds.live.get(job_id))
        assert live is not None and live.world == 2
        ranks = _rank_processes()
        assert len(ranks) == 2, ranks  # both ranks of the running attempt, seen from here

        def failure_rate(rate: float) -> None:
            rounds.rules = dataclasses.replace(rounds.rules, failure_rate=rate)

        on_loop(broker, lambda: failure_rate(1.0))
        wait_for(lambda: driver.injected >= 1, timeout=30)
        on_loop(broker, lambda: failure_rate(0.0))

        def record() -> Any:
            return next(a for a in broker.call(lambda: store.attempts(job_id))
                        if a.id == live.store_attempt)

        wait_for(lambda: record().finished_at is not None, timeout=10)
        assert record().error_class is not None and record().error_class.value == "Killed"
        # Every rank process of the killed attempt is gone within a second of the kill.
        deadline = time.monotonic() + 1.0
        while ranks & _rank_processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not ranks & _rank_processes(), "a rank survived the kill"
        job = wait_job(client, job_id, timeout=90)
        assert job["state"] == "SUCCEEDED"
        assert times(broker, job_id).failures >= 1
        starts = [step for attempt, _, rank, step in attempts_log(broker, job_id)
                  if rank == 0 and attempt != live.store_attempt]
        assert starts and starts[0] > 0  # the next attempt resumed from the checkpoint


def test_progress_reports_are_checked(broker: BrokerThread) -> None:
    client = broker.client()
    job_id = elastic_job(client, steps=200)
    driver = broker.embedded.broker.elastic
    rounds = broker.embedded.broker.core.elastic
    assert rounds is not None

    def live_attempt() -> str | None:
        live = rounds.live.get(job_id)
        return live.store_attempt if live is not None else None

    wait_for(lambda: on_loop(broker, live_attempt) is not None)
    attempt = on_loop(broker, live_attempt)
    url = f"/v1/jobs/{job_id}/progress"

    ok = client.post(url, json={"attempt": attempt, "samples_per_s": 12.5, "fraction": 0.1})
    assert ok.status_code == 200 and ok.json()["accepted"] is True
    stale = client.post(url, json={"attempt": f"{job_id}:99", "step": 3})
    assert stale.status_code == 200 and stale.json()["accepted"] is False

    token = driver.progress_token(attempt)
    anonymous = httpx.Client(base_url=broker.url, headers={"Authorization": f"Bearer {token}"})
    assert anonymous.post(url, json={"attempt": attempt, "step": 1}).json()["accepted"]
    forged = anonymous.post(url, json={"attempt": f"{job_id}:5", "step": 1})
    assert forged.status_code == 401 and forged.json()["error"] == "Unauthorized"

    other = broker.client(broker.issue("mallory"))
    assert other.post(url, json={"attempt": attempt}).json()["error"] == "NotFound"

    bad = client.post(url, json={"attempt": attempt, "fraction": 1.5})
    assert bad.status_code == 422 and bad.json()["field"] == "fraction"
    nan = client.post(url, content=b'{"attempt": "%s", "samples_per_s": NaN}' % attempt.encode(),
                      headers={"Content-Type": "application/json"})
    assert nan.status_code == 422
    wrong_job = client.post(url, json={"attempt": "someone-else:0"})
    assert wrong_job.status_code == 422 and wrong_job.json()["field"] == "attempt"

    task = submit(client, pool="slots", command=[sys.executable, "-c", "pass"])
    refused = client.post(f"/v1/jobs/{task}/progress", json={"attempt": f"{task}:0"})
    assert refused.json()["error"] == "ValidationError" and refused.json()["field"] == "job_id"
    client.post(f"/v1/jobs/{job_id}/cancel")
    assert wait_job(client, job_id)["state"] == "CANCELLED"


def test_cancelling_elastic_jobs_frees_their_slots(broker: BrokerThread) -> None:
    client = broker.client()
    running = elastic_job(client, steps=400)
    rounds = broker.embedded.broker.core.elastic
    assert rounds is not None
    wait_for(lambda: on_loop(broker, lambda: running in rounds.live))
    queued = elastic_job(client, steps=5, low=2, high=2)  # needs both slots: waits
    client.post(f"/v1/jobs/{queued}/cancel")
    assert wait_job(client, queued)["state"] == "CANCELLED"
    client.post(f"/v1/jobs/{running}/cancel")
    assert wait_job(client, running)["state"] == "CANCELLED"
    after = elastic_job(client, steps=5, low=2, high=2)
    assert wait_job(client, after, timeout=30)["state"] == "SUCCEEDED"


@pytest.mark.parametrize(
    ("elastic", "field"),
    [
        (None, "elastic"),
        ({"app": "nope"}, "elastic.app"),
        ({"app": "cifar10", "min_pods": 3, "max_pods": 2}, "elastic.max_pods"),
        ({"app": "cifar10", "min_pods": 0}, "elastic.min_pods"),
        ({"app": "cifar10", "surprise": 1}, "elastic.surprise"),
    ],
)
def test_bad_elastic_specs_are_refused_by_name(
    broker: BrokerThread, elastic: dict[str, Any] | None, field: str
) -> None:
    body: dict[str, Any] = {"pool": "slots", "command": ["x"], "kind": "elastic"}
    if elastic is not None:
        body["elastic"] = elastic
    answer = broker.client().post("/v1/jobs", json=body)
    assert answer.status_code == 422
    assert answer.json()["error"] == "ValidationError" and answer.json()["field"] == field
    task = broker.client().post(
        "/v1/jobs", json={"pool": "slots", "command": ["x"], "elastic": {"app": "cifar10"}}
    )
    assert task.status_code == 422 and task.json()["field"] == "elastic"

"""`firepool run`: streams the job's output to stdout and exits with the job's exit code."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from cli_harness import Invoke

from firepool.api.schemas import JobOut
from firepool.cli.run import outcome
from firepool.client import zip_directory
from firepool.model import JobErrorClass, JobState
from firepool.testing.broker import LiveBroker

MAIN = """\
import os, sys
print("seed", os.environ["SEED"], "args", sys.argv[1:], flush=True)
sys.exit(int(sys.argv[1]))
"""


def test_run_streams_and_exits_with_the_jobs_code(cli_e2e: Invoke, tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text(MAIN)
    (tmp_path / "req.txt").write_text("")
    args = ["run", "--pool", "cpu", "--package", str(tmp_path), "--env", "SEED=7"]
    failed = cli_e2e(
        *args, "--requirements", str(tmp_path / "req.txt"), "--", "python", "main.py", "3"
    )
    assert failed.exit_code == 3, failed.output
    assert failed.stdout == "seed 7 args ['3']\n", failed.stderr
    assert "NonZeroExit" in failed.stderr and "exit code 3" in failed.stderr
    # No `--` needed: everything after the command's first word belongs to it.
    ok = cli_e2e(*args, "--tag", "s1", "python", "main.py", "0", "--not-an-option")
    assert ok.exit_code == 0, ok.output
    assert ok.stdout == "seed 7 args ['0', '--not-an-option']\n", ok.stderr
    # Warm, recycled or new depends on whether the first pod finished its reset in time.
    assert re.search(r"SUCCEEDED · exit 0 · cpu-\w+ \w+/\w+", ok.stderr), ok.stderr
    digest = zip_directory(tmp_path).digest  # already uploaded: a digest names it
    by_digest = cli_e2e(
        "run", "--pool", "cpu", "--package", digest, "-e", "SEED=1", "--", "python", "main.py", "0"
    )
    assert by_digest.exit_code == 0 and by_digest.stdout == "seed 1 args ['0']\n"


def test_a_job_that_ends_without_an_exit_code_fails_clearly(
    cli: Invoke, broker: LiveBroker
) -> None:
    def cancel_when_queued() -> None:
        for _ in range(500):
            queued = broker.store.list_jobs(states=[JobState.QUEUED])
            if queued:
                broker.log(queued[0].id, "partial output\n")
                broker.store.cancel(queued[0].id, now=time.time())
                return
            time.sleep(0.01)

    worker = threading.Thread(target=cancel_when_queued)
    worker.start()
    result = cli("run", "--pool", "cpu", "--", "python", "main.py")
    worker.join()
    assert result.exit_code == 1
    assert result.stdout == "partial output\n"
    assert "CANCELLED without an exit code (Cancelled)" in result.stderr


def test_refused_submissions_exit_125(cli: Invoke, broker: LiveBroker) -> None:
    result = cli("run", "--pool", "tpu", "--", "true")
    assert result.exit_code == 125 and "UnknownPool" in result.stderr
    result = cli("run", "--pool", "cpu", "--env", "LD_PRELOAD=x", "--", "true")
    assert result.exit_code == 125 and "ForbiddenEnv" in result.stderr
    result = cli("run", "--pool", "cpu", "--image", "docker.io/evil:1", "--", "true")
    assert result.exit_code == 125 and "ImageNotAllowed" in result.stderr
    bad = cli("run", "--pool", "cpu", "--env", "NOEQUALS", "--", "true")
    assert bad.exit_code == 2 and "K=V" in bad.output
    assert broker.store.list_jobs() == []


def test_detach_prints_the_id(cli: Invoke, broker: LiveBroker) -> None:
    result = cli("run", "-d", "--pool", "cpu", "--single-use", "--pods", "2", "--", "true")
    assert result.exit_code == 0
    job = broker.job(result.stdout.strip())
    assert job.spec.single_use and job.spec.pods == 2 and job.state == JobState.QUEUED
    image = "registry.local/team/trainer:v3"
    result = cli("run", "-d", "--pool", "cpu", "--image", image, "--", "true")
    assert result.exit_code == 0 and broker.job(result.stdout.strip()).spec.image == image


def test_exit_status_rules() -> None:
    def job(state: JobState, code: int | None, error: JobErrorClass | None = None) -> JobOut:
        return JobOut.model_validate(
            {
                "id": "j1",
                "state": state,
                "attempt": "j1:0",
                "version": 1,
                "pool": "cpu",
                "queue": "default",
                "lease_tag": "",
                "request_id": None,
                "exit_code": code,
                "error_class": error,
                "message": None,
                "retries": 0,
                "cancel_requested": False,
                "pods": [],
                "timings": {},
                "spec": {"pool": "cpu", "command": ["x"]},
            }
        )

    assert outcome(job(JobState.SUCCEEDED, 0)) == (0, None)
    assert outcome(job(JobState.FAILED, 3, JobErrorClass.NON_ZERO_EXIT))[0] == 3
    assert outcome(job(JobState.FAILED, -9, JobErrorClass.KILLED))[0] == 137
    assert outcome(job(JobState.FAILED, 300, JobErrorClass.NON_ZERO_EXIT))[0] == 1
    status, message = outcome(job(JobState.FAILED, None, JobErrorClass.POD_LOST))
    assert status == 1 and message is not None and "PodLost" in message

"""`firepool pods prune` (issue 13, item 3): the pods of a broker that will not come back are
removed, agents, jobs and files; refused while the broker still answers. Real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_recovery_crash import _CLEANUP, CATALOG, client, start_server

from firepool.agent import procfs
from firepool.backends.base import PodRecord
from firepool.backends.local import LocalBackend

pytestmark = pytest.mark.timeout(300)


def listed(data: Path) -> list[PodRecord]:
    async def go() -> list[PodRecord]:
        return await LocalBackend(str(data / "pods")).list_pods()

    return asyncio.run(go())


def prune(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "firepool.cli.main", "pods", "prune", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_prune_removes_the_pods_of_a_dead_broker_and_refuses_a_live_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    catalog = tmp_path / "pools.toml"
    catalog.write_text(CATALOG)
    server = start_server(data, catalog)
    try:
        with client(data) as c:
            deadline = time.monotonic() + 60
            while len([p for p in c.get("/v1/pods").json()["pods"] if p["state"] == "idle"]) < 2:
                assert time.monotonic() < deadline  # the pool's two warm pods
                time.sleep(0.05)
        refused = prune(data)
        assert refused.returncode == 1 and "field: data_dir" in refused.stderr, refused.stderr
        assert len(listed(data)) == 2  # untouched
        os.killpg(server.pid, signal.SIGKILL)  # a broker that will not come back
        server.wait(timeout=10)
        agents = [p.pid for p in listed(data)]
        assert len(agents) == 2 and all(procfs.alive(pid) for pid in agents)
        done = prune(data)
        assert done.returncode == 0 and "removed 2 pod(s)" in done.stdout, done.stderr
        assert listed(data) == [] and not any(procfs.alive(pid) for pid in agents)
        assert prune(data).stdout.startswith("removed 0 pod(s)")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)


def test_serve_adopts_the_live_pods_it_finds_and_deletes_the_dead(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    catalog = tmp_path / "pools.toml"
    catalog.write_text(CATALOG)
    server = start_server(data, catalog)
    try:
        with client(data) as c:
            deadline = time.monotonic() + 60
            while len([p for p in c.get("/v1/pods").json()["pods"] if p["state"] == "idle"]) < 2:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        live, dead = listed(data)
        os.kill(dead.pid, signal.SIGKILL)  # its agent died while no broker ran
        deadline = time.monotonic() + 30
        while procfs.alive(dead.pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        server = start_server(data, catalog)
        with client(data) as c:
            names = {p["name"] for p in c.get("/v1/pods").json()["pods"]}
            assert live.name in names and dead.name not in names
        deadline = time.monotonic() + 60
        while dead.name in {p.name for p in listed(data)}:
            assert time.monotonic() < deadline  # deleted, files and all
            time.sleep(0.05)
        assert not (data / "pods" / dead.name).exists()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        subprocess.run([sys.executable, "-c", _CLEANUP, str(data)], check=False, timeout=60)

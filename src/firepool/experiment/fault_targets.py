"""The things a fault campaign breaks, as handles: the `firepool serve` process (SIGKILLed
and restarted on the same port and data directory), its store (a private PostgreSQL server
stopped and started, or the SQLite file locked by another connection), and the pods' agents
(SIGSTOPped for a partition, SIGKILLed)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx

from firepool.backends.base import PodRecord
from firepool.store.engine import DB_FILE
from firepool.testing.private_db import PrivateServer, free_port

_DISPATCHING = re.compile(r"dispatching ([0-9.]+) ms after start")
_LOST_IN_RESTART = re.compile(r"of caller (\S+): attempt \S+ lost in the restart; pods (\S+)")


class ServeProcess:
    """`firepool serve` as a child process group on a fixed port (clients keep their URL
    across restarts); its log is appended to `<data>/serve.log`."""

    def __init__(self, data: Path, catalog: Path, store_url: str | None, isolation: str) -> None:
        self.data = data
        self.catalog = catalog
        self.store_url = store_url
        self.isolation = isolation
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def cli(self, *args: str) -> str:
        """A `firepool` command against this data directory and store."""
        store = ["--store", self.store_url] if self.store_url else []
        return subprocess.run(
            [sys.executable, "-m", "firepool.cli.main", *args, "--data-dir", str(self.data),
             *store],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout.strip()  # fmt: skip

    def start(self, timeout: float = 120.0) -> float:
        """Start and wait until the API answers; returns the seconds that took."""
        started = time.monotonic()
        (self.data / "url").unlink(missing_ok=True)  # written once the token is
        store = ["--store", self.store_url] if self.store_url else []
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "firepool.cli.main", "serve", "--data-dir",
                 str(self.data), "--port", str(self.port), "--catalog", str(self.catalog),
                 "--isolation", self.isolation, "--log-level", "info", "--delete-pods",
                 *store],
                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
            )  # fmt: skip
        deadline = started + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"firepool serve exited: see {self.log}")
            try:
                up = httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
                if up and (self.data / "url").exists():
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"firepool serve did not answer within {timeout:.0f} s")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the server's whole process group: no shutdown code runs."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)

    def log_offset(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def dispatching_ms(self, since: int, timeout: float = 30.0) -> float | None:
        """The broker's own 'dispatching N ms after start' line logged after `since`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log, "rb") as fh:
                fh.seek(since)
                found = _DISPATCHING.search(fh.read().decode(errors="replace"))
            if found:
                return float(found.group(1))
            time.sleep(0.05)
        return None


def lost_in_restart(log: Path, since: int = 0) -> dict[str, str]:
    """Pod -> caller, for each attempt a broker logged lost in its recovery after byte
    `since` of its log (`service.recovery`): those pods were busy with their caller's job."""
    with open(log, "rb") as fh:
        fh.seek(since)
        text = fh.read().decode(errors="replace")
    return {
        pod: found.group(1)
        for found in _LOST_IN_RESTART.finditer(text)
        for pod in found.group(2).split(",")
    }


def agent_pid(data: Path, pod: str) -> int | None:
    """The pid of a local pod's agent, from the backend's state file."""
    path = data / "pods" / ".state" / f"{pod}.pod.json"
    try:
        return PodRecord.model_validate_json(path.read_text()).pid
    except (OSError, ValueError):
        return None


class StoreOutage:
    """Makes the broker's store unavailable for a while, then available again."""

    def __init__(self, data: Path, postgres: PrivateServer | None) -> None:
        self.db_file = data / DB_FILE
        self.postgres = postgres

    @property
    def kind(self) -> str:
        return "postgresql" if self.postgres is not None else "sqlite"

    def __call__(self, seconds: float) -> None:
        if self.postgres is not None:
            self.postgres.stop()  # every connection is cut
            time.sleep(seconds)
            self.postgres.start()
            return
        # SQLite has no server: another connection holds the file's exclusive lock, so every
        # read and write of the broker waits out its busy timeout and fails.
        conn = sqlite3.connect(self.db_file, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            time.sleep(seconds)
            conn.execute("ROLLBACK")
        finally:
            conn.close()

"""A PostgreSQL server of our own, in a temporary directory on a free port, that a fault
campaign (or a test) may stop and start at will: the shared server on 5432 is never touched.

PostgreSQL refuses to run as root, so under root the server runs as the `postgres` user
(`runuser`); its data directory is handed to that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from firepool.model import ConfigError

BIN_DIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14))


def postgres_bin() -> Path | None:
    """The directory holding initdb and pg_ctl, or None where PostgreSQL is not installed."""
    for d in BIN_DIRS:
        if (Path(d) / "pg_ctl").exists():
            return Path(d)
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """`with PrivatePostgres() as pg:` a running server; `pg.url`, `pg.stop()`, `pg.start()`."""

    def __init__(self, root: Path | None = None) -> None:
        bindir = postgres_bin()
        if bindir is None:
            raise ConfigError("PostgreSQL's initdb/pg_ctl are not installed", field="store")
        self.bin = bindir
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="firepool-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/firepool"
        self._user = "postgres" if os.geteuid() == 0 else None

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._user is not None:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def __enter__(self) -> PrivatePostgres:
        self.root.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.root}'\nfsync = off\n"
                       "max_connections = 200\n")  # fmt: skip
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  "firepool")  # fmt: skip
        return self

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                  "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        """A fast shutdown: every connection is cut, as when a database server restarts."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

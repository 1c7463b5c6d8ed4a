"""Private PostgreSQL and MariaDB servers that a test may stop and start again.

The shared servers on 5432 and 3306 serve every test run on the machine at once, so a fault
test must never stop them. These are started from scratch in a temporary directory, on a free
port of 127.0.0.1, by the same binaries the packages install (`initdb` / `pg_ctl`,
`mariadb-install-db` / `mariadbd`); fsync is off (a restart here is a clean shutdown, not a
power cut). Starting one costs about a second; a session-scoped fixture pays it once.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa

from firepool.store.scratch import reachable


def _pg_bin() -> Path:
    """Where initdb and pg_ctl are: FIREPOOL_PG_BIN, else Debian's newest cluster version,
    else the PATH."""
    if "FIREPOOL_PG_BIN" in os.environ:
        return Path(os.environ["FIREPOOL_PG_BIN"])
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1].parent
    found = shutil.which("initdb")
    return Path(found).parent if found else Path("/usr/lib/postgresql/15/bin")


PG_BIN = _pg_bin()
_START_TIMEOUT_S = 60.0


class ServerError(RuntimeError):
    """The private server could not be set up or started (names the command and its output)."""


class PrivateServer(ABC):
    """One private database server: `url` to reach it, `stop()` and `start()` to fault it."""

    kind: str = ""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.running = False

    @property
    @abstractmethod
    def url(self) -> str: ...

    def start(self) -> None:
        self._launch()
        deadline = time.monotonic() + _START_TIMEOUT_S
        problem = reachable(self.url, timeout=2.0)
        while problem is not None:
            if time.monotonic() > deadline:
                raise ServerError(f"{self.kind} did not come up: {problem}\n{self.log_tail()}")
            time.sleep(0.1)
            problem = reachable(self.url, timeout=2.0)
        self.running = True

    def stop(self) -> None:
        """A clean, fast shutdown: open connections are cut, as an operator's restart does."""
        self._halt()
        self.running = False

    def close(self) -> None:
        if self.running:
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    @abstractmethod
    def create_database(self) -> str:
        """A URL of a fresh database of its own on this server (one per test)."""
        ...

    def log_tail(self) -> str:
        log = self.root / "server.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else ""

    @abstractmethod
    def _launch(self) -> None: ...

    @abstractmethod
    def _halt(self) -> None: ...


class PrivatePostgres(PrivateServer):
    kind = "postgresql"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.data = root / "data"
        # initdb refuses to run as root: a root test run uses the packages' postgres user.
        self._as: list[str] = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(root, "postgres")
        _run(
            [
                *self._as,
                str(PG_BIN / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ]
        )

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def create_database(self) -> str:
        name = _fresh_name()
        _admin(self.url, f"CREATE DATABASE {name}")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def _launch(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200"
        )
        _run(
            [
                *self._as,
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.root / "server.log"),
                "-w",
                "start",
            ]
        )

    def _halt(self) -> None:
        _run([*self._as, str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])


class PrivateMariaDB(PrivateServer):
    kind = "mysql"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.data = root / "data"
        self._process: subprocess.Popen[bytes] | None = None
        _run(
            [
                _which("mariadb-install-db", "mysql_install_db"),
                "--no-defaults",
                f"--datadir={self.data}",
                f"--user={_user()}",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ]
        )

    @property
    def url(self) -> str:
        return f"mysql+pymysql://root:@127.0.0.1:{self.port}/mysql"

    def create_database(self) -> str:
        name = _fresh_name()
        _admin(self.url, f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        return f"mysql+pymysql://root:@127.0.0.1:{self.port}/{name}"

    def _launch(self) -> None:
        with open(self.root / "server.log", "ab") as log:
            self._process = subprocess.Popen(
                [
                    _which("mariadbd", "mysqld"),
                    "--no-defaults",
                    f"--datadir={self.data}",
                    f"--socket={self.root / 'mysql.sock'}",
                    f"--port={self.port}",
                    "--bind-address=127.0.0.1",
                    f"--user={_user()}",
                    "--skip-grant-tables",
                    "--skip-log-bin",
                    "--innodb-buffer-pool-size=16M",
                    "--innodb-flush-log-at-trx-commit=0",
                    "--max-connections=200",
                    f"--pid-file={self.root / 'mysql.pid'}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _halt(self) -> None:
        process = self._process
        if process is None:
            return
        process.send_signal(signal.SIGTERM)  # mariadbd's clean shutdown
        try:
            process.wait(_START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._process = None


def start_private(kind: str) -> PrivateServer:
    """A started private server of `kind` ("postgresql" or "mysql"); `close()` removes it."""
    root = Path(tempfile.mkdtemp(prefix=f"firepool-{kind}-"))
    os.chmod(root, 0o755)
    try:
        server: PrivateServer = (
            PrivatePostgres(root) if kind == "postgresql" else (PrivateMariaDB(root))
        )
        server.start()
    except (OSError, LookupError) as err:  # a binary, the postgres user or a port missing
        shutil.rmtree(root, ignore_errors=True)
        raise ServerError(f"cannot set up a private {kind} server: {err}") from err
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return server


def _run(argv: Sequence[str]) -> None:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=_START_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ServerError(f"{argv[0]}: {err}") from err
    if done.returncode != 0:
        raise ServerError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")


def _which(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
        if found:
            return found
    raise ServerError(f"none of {', '.join(names)} is installed")


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _admin(url: str, statement: str) -> None:
    engine = sa.create_engine(url, poolclass=sa.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(statement))
    finally:
        engine.dispose()


def _fresh_name() -> str:
    return "fp_" + os.urandom(6).hex()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port

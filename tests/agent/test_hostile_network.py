"""Hostile jobs against the network: from inside a job, reach the host's loopback services, another
pod's agent, another caller's running job, read `/proc/net`, leave a listener, flood.

The module runs once per network a local pod may get on this machine: `none` (its own loopback)
and `egress` (a NAT to public addresses) in private mode, `host` in private mode with the
namespace switched off (`network_namespace=False`), and `host` in weak mode. Every probe asserts
`reached == (network is host)`: in the two isolated modes nothing answers, and the same probe
reaching its target in the `host` modes shows it is a real probe (the tests fail with the
namespace switched off). Network only on 127.0.0.1 and the host's own addresses; the egress
checks send no packet off the machine (a UDP connect only asks the routing table).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pod_helpers import EventSink, Loop, backend_at, json_job, make_pod, py, read_log, run_job

from firepool.agent import egress, netns, reset
from firepool.backends.agent_client import AgentClient
from firepool.backends.base import PodRecord
from firepool.backends.local import LocalBackend
from firepool.model import ConfigError, NetworkAccess
from firepool.protocol import LaunchRequest, PodNetwork
from firepool.testing.control import cpu_pool
from firepool.testing.host import needs

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Mode:
    isolation: str
    access: NetworkAccess
    namespace: bool
    expected: PodNetwork

    @property
    def id(self) -> str:
        return f"{self.isolation}-{self.expected.value}" + (
            "" if self.namespace else "-switched-off"
        )


MODES = [
    Mode("private", NetworkAccess.NONE, True, PodNetwork.NONE),
    Mode("private", NetworkAccess.EGRESS, True, PodNetwork.EGRESS),
    Mode("private", NetworkAccess.NONE, False, PodNetwork.HOST),
    Mode("weak", NetworkAccess.NONE, True, PodNetwork.HOST),
]

#: Connect to each (host, port) given as JSON; print what happened to each.
CONNECT = """
import errno, json, socket, sys
out = {}
for host, port in json.loads(sys.argv[1]):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        out[f"{host}:{port}"] = "connected"
    except OSError as exc:
        out[f"{host}:{port}"] = errno.errorcode.get(exc.errno, str(exc))
    finally:
        s.close()
print(json.dumps(out))
"""


@dataclass
class Env:
    mode: Mode
    backend: LocalBackend
    loop: Loop
    record: PodRecord
    client: AgentClient
    other: tuple[PodRecord, AgentClient]
    n: int = 0

    @property
    def network(self) -> PodNetwork:
        return self.mode.expected

    @property
    def isolated(self) -> bool:
        return self.network is not PodNetwork.HOST

    def attempt(self) -> str:
        self.n += 1
        return f"net-{self.n}:0"

    def connect(self, targets: list[tuple[str, int]]) -> dict[str, str]:
        event, out = self.loop.run(
            run_job(self.client, self.attempt(), ["python", "-c", CONNECT, json.dumps(targets)])
        )
        assert event.exit_code == 0, self.loop.run(
            read_log(self.client, f"net-{self.n}:0", "stderr")
        )
        return dict(json.loads(out))

    def reset_clean(self, client: AgentClient | None = None) -> None:
        result = self.loop.run((client or self.client).reset())
        assert result.clean, result.reason


@pytest.fixture(scope="module", params=MODES, ids=lambda m: m.id)
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    mode: Mode = request.param
    pool = cpu_pool("net", memory_mib_per_pod=512, network=mode.access)
    sink = EventSink()
    try:
        with backend_at(
            f"net-{mode.id}", isolation=mode.isolation, network_namespace=mode.namespace
        ) as (backend, loop, _):
            record, client = loop.run(make_pod(backend, pool, callback_url=sink.url))
            other = loop.run(make_pod(backend, pool))
            yield Env(mode, backend, loop, record, client, other)
    except ConfigError as exc:  # a failure under CI=true, where every mode is provided
        needs(f"network mode {mode.id} ({exc})")
    finally:
        sink.close()


@pytest.fixture(scope="module")
def host_service() -> Iterator[int]:
    """A service on the host's loopback that answers anyone (as PostgreSQL with trust auth)."""
    server = socket.create_server(("127.0.0.1", 0), backlog=256)

    def serve() -> None:
        with contextlib.suppress(OSError):  # closed at the end
            while True:
                server.accept()[0].close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.shutdown(socket.SHUT_RDWR)
    server.close()
    thread.join(5)


def _host_addresses() -> list[str]:
    return [a for a, _ in egress.host_addresses() if not a.startswith("127.")]


def test_the_pod_records_its_network(env: Env) -> None:
    health = env.loop.run(env.client.health())
    assert health.network is env.network
    recorded = env.loop.run(env.backend.get(env.record.name))
    assert recorded is not None and recorded.network == env.network.value


def test_host_loopback_services_are_out_of_reach(env: Env, host_service: int) -> None:
    # Ours, and whatever the machine runs: the CI's PostgreSQL and MariaDB among them.
    targets = [("127.0.0.1", host_service), ("127.0.0.1", 5432), ("127.0.0.1", 3306)]
    targets += [(addr, host_service) for addr in _host_addresses()]
    targets += [("10.0.2.2", host_service)]  # the NAT's gateway, which could map to the host
    seen = env.connect(targets)
    assert (seen[f"127.0.0.1:{host_service}"] == "connected") is not env.isolated, seen
    if env.isolated:
        assert "connected" not in seen.values(), seen
    env.reset_clean()


def test_another_pods_agent_is_out_of_reach(env: Env) -> None:
    other, _ = env.other
    port = int(other.agent_url.rsplit(":", 1)[1])
    seen = env.connect([("127.0.0.1", port)])
    assert (seen[f"127.0.0.1:{port}"] == "connected") is not env.isolated, seen
    env.reset_clean()


def test_another_callers_running_job_is_out_of_reach(env: Env) -> None:
    """The other pod's job listens on every address of its pod; ours knows its port."""
    _, other_client = env.other
    listener = py(
        """
        import socket, sys, time
        s = socket.create_server(("0.0.0.0", 0))
        print(s.getsockname()[1], flush=True)
        time.sleep(60)
        """
    )
    attempt = "victim-1:0"
    env.loop.run(other_client.launch(LaunchRequest(attempt=attempt, argv=listener)))
    port = _first_line(env, other_client, attempt)
    targets = [("127.0.0.1", port), ("10.0.2.100", port)]
    targets += [(addr, port) for addr in _host_addresses()]
    seen = env.connect(targets)
    assert (seen[f"127.0.0.1:{port}"] == "connected") is not env.isolated, seen
    if env.isolated:
        assert "connected" not in seen.values(), seen
    env.reset_clean(other_client)
    env.reset_clean()


def _first_line(env: Env, client: AgentClient, attempt: str, timeout: float = 20.0) -> int:
    """The port a running job printed (its log so far, not followed to the end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = env.loop.run(read_log(client, attempt))
        if out.strip():
            return int(out.split()[0])
        time.sleep(0.05)
    raise TimeoutError(f"{attempt} printed nothing")


def test_proc_net_shows_no_host_socket(env: Env, host_service: int) -> None:
    listening = env.loop.run(
        json_job(
            env.client,
            env.attempt(),
            """
            import json
            ports = []
            for table in ("tcp", "tcp6"):
                for line in open(f"/proc/net/{table}").read().splitlines()[1:]:
                    cols = line.split()
                    if cols[3] == "0A":
                        ports.append(int(cols[1].rsplit(":", 1)[1], 16))
            print(json.dumps(ports))
            """,
        )
    )
    assert (host_service in listening) is not env.isolated, listening
    if env.isolated:
        assert listening == []  # not even the agents: they live on the host's side
    env.reset_clean()


def test_a_listener_left_behind_is_gone_after_reset(env: Env) -> None:
    """A daemonised listener outlives its job's exit; reset kills it, and checks no socket of
    the job is left (a held socket would make the reset unclean)."""
    leave = py(
        """
        import os, socket, time
        s = socket.create_server(("127.0.0.1", 0))
        print(s.getsockname()[1], flush=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(300)
            os._exit(0)
        """
    )
    event, out = env.loop.run(run_job(env.client, env.attempt(), leave))
    assert event.exit_code == 0
    port = int(out.split()[0])
    env.reset_clean()
    seen = env.connect([("127.0.0.1", port)])
    assert seen[f"127.0.0.1:{port}"] != "connected", seen
    env.reset_clean()


def test_an_outbound_flood_reaches_nothing_it_may_not(env: Env, host_service: int) -> None:
    flood = py(
        f"""
        import errno, json, socket, time
        targets = [("127.0.0.1", {host_service}), ("10.0.2.2", {host_service}),
                   ("169.254.169.254", 80), ("10.255.255.53", 53), ("192.168.1.1", 80),
                   ("172.16.0.1", 80)]
        outcome, began = {{}}, time.monotonic()
        for i in range(1000):
            host, port = targets[i % len(targets)]
            s = socket.socket()
            s.setblocking(False)
            code = s.connect_ex((host, port))
            if code == errno.EINPROGRESS:  # only a real path gets this far: wait briefly
                s.settimeout(0.2)
                try:
                    s.connect((host, port))
                    code = 0
                except OSError as exc:
                    code = exc.errno or -1
            s.close()
            key = f"{{host}}:{{errno.errorcode.get(code, code) if code else 'connected'}}"
            outcome[key] = outcome.get(key, 0) + 1
            if time.monotonic() - began > 30:
                break
        print(json.dumps(outcome))
        """
    )
    event, out = env.loop.run(run_job(env.client, env.attempt(), flood), timeout=90)
    assert event.exit_code == 0
    outcome = json.loads(out)
    connected = sum(n for k, n in outcome.items() if k.endswith(":connected"))
    if env.isolated:
        assert connected == 0, outcome
    else:
        assert outcome.get("127.0.0.1:connected", 0) > 0, outcome
    env.reset_clean()


def test_egress_has_a_route_out_and_none_has_none(env: Env) -> None:
    """A UDP connect asks the routing table only: no packet leaves the machine."""
    seen = env.loop.run(
        json_job(
            env.client,
            env.attempt(),
            """
            import errno, json, socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            code = s.connect_ex(("203.0.113.7", 9))
            resolv = open("/etc/resolv.conf").read()
            print(json.dumps([errno.errorcode.get(code, code) if code else "routed", resolv]))
            """,
        )
    )
    route, resolv = seen
    if env.network is PodNetwork.NONE:
        assert route == "ENETUNREACH"
    else:
        assert route == "routed"
    if env.network is PodNetwork.EGRESS:
        assert f"nameserver {egress.DNS_ADDRESS}" in resolv
    env.reset_clean()


# ------------------------------------------------------------------ the reset's socket check


def test_held_sockets_reports_a_listener_in_a_namespace_and_not_a_closed_one() -> None:
    if os.geteuid() != 0:
        needs("root (network namespaces)")
    code = textwrap.dedent(
        """
        import json, socket, sys
        from firepool.agent import netns, reset
        netns.loopback_up()
        s = socket.create_server(("127.0.0.1", 0))
        c = socket.create_connection(s.getsockname())
        held = netns.held_sockets("/proc/self/net")
        c.close(); s.close()
        after = netns.held_sockets("/proc/self/net")
        print(json.dumps([held, after]))
        """
    )
    out = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    held, after = json.loads(out)
    assert any("LISTEN" in h for h in held) and any("ESTABLISHED" in h for h in held), held
    assert after == []


def test_held_sockets_of_one_uid_only_in_a_shared_namespace() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        port = server.getsockname()[1]
        mine = netns.held_sockets("/proc/self/net", os.getuid())
        assert any(f"127.0.0.1:{port} LISTEN" in h for h in mine), mine
        assert not any(str(port) in h for h in netns.held_sockets("/proc/self/net", 4_000_000))
    finally:
        server.close()


def test_reset_names_a_socket_held_in_the_pods_namespace() -> None:
    """What verified reset reports when something still holds a socket there."""
    if os.geteuid() != 0:
        needs("root (network namespaces)")
    holder = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c",
         "import socket, sys, time; from firepool.agent import netns; netns.loopback_up();"
         "s = socket.create_server(('127.0.0.1', 4242)); print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        # unshare execs its command in place: the holder's pid is the Popen's
        problems = reset.socket_problems(f"/proc/{holder.pid}/net", None)
        assert problems and "127.0.0.1:4242 LISTEN" in problems[0], problems
        assert reset.socket_problems(None, None) == []
    finally:
        holder.kill()
        holder.wait()


def test_egress_refuses_private_ranges_and_the_hosts_subnets() -> None:
    refused = egress.refused_networks([("192.0.2.2", 24), ("10.1.2.3", 16), ("fd00::2", 64)])
    assert "192.0.2.0/24" in refused and "10.0.0.0/8" in refused
    assert "10.1.0.0/16" not in refused  # inside 10/8 already
    assert "169.254.0.0/16" in refused and "100.64.0.0/10" in refused
    rules = egress.rule_commands(refused).splitlines()
    assert rules[0] == f"rule add to {egress.DNS_ADDRESS}/32 lookup main pref 99"
    assert all(r.endswith("prohibit pref 100") for r in rules[1:])


# ------------------------------------------------------------------ the progress relay


class Upstream:
    """A stand-in for the broker's progress route: records what reaches it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream.seen.append((self.path, self.headers.get("Authorization", ""), body))
                job = self.path.split("/")[3]
                answer = json.dumps({"job": job, "attempt": f"{job}:0", "accepted": True})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer.encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


REPORT = """
import json, os, sys
from firepool.client import report_progress
from firepool.protocol import JobEnv
out = report_progress(step=7, fraction=0.5)
print(json.dumps([os.environ[JobEnv.URL], out.accepted if out else None]))
"""

PRINT_URL = ["python", "-c", "import os; print(os.environ['FIREPOOL_URL'])"]

#: Through the relay's socket, everything but the progress route (the job knows the path).
PROBE_RELAY = """
import json, os, socket
path = os.environ["FIREPOOL_URL"].removeprefix("unix:")
def ask(request: bytes) -> str:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(request)
    answer = s.recv(4096).decode(errors="replace")
    s.close()
    return answer.split("\\r\\n", 1)[0]
print(json.dumps([
    ask(b"GET /v1/jobs HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"),
    ask(b"POST /v1/pools HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 2\\r\\n\\r\\n{}"),
    ask(b"POST /v1/jobs/a/progress HTTP/1.1\\r\\nHost: x\\r\\n"
        b"Content-Length: 99999999\\r\\n\\r\\n"),
]))
"""


def test_progress_reports_reach_the_broker_and_nothing_else_does(env: Env) -> None:
    upstream = Upstream()
    try:
        job_env = {
            "FIREPOOL_URL": upstream.url,
            "FIREPOOL_JOB_ID": "job7",
            "FIREPOOL_ATTEMPT": "job7:0",
            "FIREPOOL_PROGRESS_TOKEN": "progress-token-of-job7",
        }
        if env.mode.isolation == "weak":
            # Its jobs import only what the warm interpreter holds (the SDK is not among them
            # here); what matters is that the broker's own URL reaches them, unrelayed.
            event, out = env.loop.run(
                run_job(env.client, env.attempt(), PRINT_URL, topology_env=job_env)
            )
            assert event.exit_code == 0 and out.strip() == upstream.url
            env.reset_clean()
            return
        event, out = env.loop.run(
            run_job(env.client, env.attempt(), ["python", "-c", REPORT], topology_env=job_env)
        )
        assert event.exit_code == 0, env.loop.run(read_log(env.client, f"net-{env.n}:0", "stderr"))
        url, accepted = json.loads(out)
        assert accepted is True
        assert url.startswith("unix:") is env.isolated  # the host's network: the broker itself
        path, auth, body = upstream.seen[-1]
        assert path == "/v1/jobs/job7/progress" and auth == "Bearer progress-token-of-job7"
        assert json.loads(body)["step"] == 7
        env.reset_clean()
        if not env.isolated:
            return
        event, out = env.loop.run(
            run_job(env.client, env.attempt(), ["python", "-c", PROBE_RELAY], topology_env=job_env)
        )
        assert event.exit_code == 0, env.loop.run(read_log(env.client, f"net-{env.n}:0", "stderr"))
        refused = json.loads(out)
        assert [line.split()[1] for line in refused] == ["404", "404", "413"], refused
        assert len(upstream.seen) == 1  # none of them reached the broker
        env.reset_clean()
    finally:
        upstream.close()

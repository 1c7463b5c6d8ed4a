"""Hostile jobs in containers on the real node: what a job leaves is gone after the verified
reset, and what is not its own (the agent's secret, the image, the host, the node's daemons,
another caller's pod) it can neither read, write, signal nor use.

On Kubernetes the container is the boundary (the agent runs its jobs in weak isolation under
the container's own uid, docs/pod-agent.md): the probes are those of tests/agent's hostile
suites that mean something inside a container, run through the broker's API as a caller
would. The node's CNI bridge enforces no NetworkPolicy (a policy engine is the cluster's:
tests/k8s/test_k8s_network_policies.py checks the policies against the API server), so a job
can open a connection to another pod's agent: the agent's secret is what refuses it here.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firepool.backends.kubernetes import KubernetesSettings
from firepool.service.broker import BrokerConfig
from firepool.testing.kubelet_node import KubeletNode
from firepool.testing.node_cluster import node_catalog, node_settings
from firepool.testing.service import BrokerThread, run, running_broker, settled

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

FAST = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)


@pytest.fixture
def node_broker(
    real_node: KubeletNode, settings: KubernetesSettings, tmp_path: Path
) -> Iterator[BrokerThread]:
    with running_broker(
        tmp_path / "broker",
        catalog=node_catalog(),
        config=FAST,
        backend="kubernetes",
        kubernetes=node_settings(settings),
        host=real_node.gateway,
    ) as handle:
        yield handle


def json_job(client: Any, code: str, *args: str, **spec: Any) -> tuple[dict[str, Any], Any]:
    """Run `code` (which prints one JSON line last) and return the job and that value."""
    job = run(client, command=["python", "-c", code, *args], timeout=120, **spec)
    assert job["state"] == "SUCCEEDED", job
    data = client.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
    return job, json.loads(data.strip().splitlines()[-1])


LEAVE_BEHIND = """
import ctypes, json, os, socket, sys, time
token = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
segment = libc.shmget(0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
assert segment >= 0, ctypes.get_errno()
open(f"/tmp/{token}", "w").write("x")
open(f"/dev/shm/{token}", "w").write("x")
open(token, "w").write("x")  # the workspace (the job's cwd)
listener = socket.socket()
listener.bind(("0.0.0.0", 0))
listener.listen()
port = listener.getsockname()[1]
read, write = os.pipe()
if os.fork() == 0:  # a double-forked, setsid daemon holding the listener
    os.setsid()
    if os.fork() == 0:
        os.write(write, str(os.getpid()).encode())
        os.close(write)
        time.sleep(600)
    os._exit(0)
os.close(write)
daemon = int(os.read(read, 32))
print(json.dumps({"daemon": daemon, "port": port, "cwd": os.getcwd(), "shm": segment}))
"""

FIND_LEFTOVERS = """
import json, os, socket, sys
token, daemon, port, cwd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
segment = sys.argv[5]
left = {}
rows = open("/proc/sysvipc/shm").read().splitlines()[1:]
left["sysv shm"] = any(row.split()[1] == segment for row in rows)
for path in (f"/tmp/{token}", f"/dev/shm/{token}", os.path.join(cwd, token)):
    left[path] = os.path.exists(path)
try:
    left["daemon"] = "sleep" in open(f"/proc/{daemon}/cmdline").read() or "python" in open(
        f"/proc/{daemon}/cmdline").read()
except OSError:
    left["daemon"] = False
probe = socket.socket()
probe.settimeout(2)
left["listener"] = probe.connect_ex(("127.0.0.1", port)) == 0
mine = {os.getpid(), os.getppid()}
others = []
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) not in mine:
        try:
            others.append(open(f"/proc/{entry}/cmdline").read().replace("\\0", " ").strip())
        except OSError:
            pass
print(json.dumps({"left": left, "processes": others}))
"""


def test_what_a_job_leaves_is_gone_after_the_verified_reset_in_the_container(
    node_broker: BrokerThread,
) -> None:
    token = "left-" + secrets.token_hex(4)
    with node_broker.client("alice") as alice:
        first, left = json_job(alice, LEAVE_BEHIND, token, lease_tag="s")
        pod = first["pods"][0]["name"]
        assert settled(node_broker, pod, timeout=60) == "held"  # reset verified clean
        second, found = json_job(
            alice, FIND_LEFTOVERS, token, str(left["daemon"]), str(left["port"]), left["cwd"],
            str(left["shm"]), lease_tag="s",
        )  # fmt: skip
        assert second["pods"][0]["name"] == pod  # the same container, reused
        assert not any(found["left"].values()), found
        # Only the agent's own processes (its warm interpreter among them) remain.
        assert all("firepool" in line or "python" in line for line in found["processes"]), found
        assert settled(node_broker, pod, timeout=60) == "held"


PROBES = """
import json, os, socket, sys, urllib.request, urllib.error
other_agent, gateway = sys.argv[1], sys.argv[2]
out = {"read": {}, "write": {}, "connect": {}, "signal": {}}
# The agent's secret and config came in its container's environment: none of it in the job's.
out["environment"] = sorted(k for k in os.environ if k.startswith("FIREPOOL_AGENT"))
agent = next(p for p in os.listdir("/proc") if p.isdigit()
             and b"firepool.agent" in open(f"/proc/{p}/cmdline", "rb").read())
for path in (f"/proc/{agent}/environ", f"/proc/{agent}/mem"):
    try:
        with open(path, "rb") as fh:
            fh.read(1)
        out["read"][path] = "read"
    except OSError as exc:
        out["read"][path] = type(exc).__name__
for directory in ("/", "/etc", "/opt/firepool", "/opt/firepool/lib", "/var/lib"):
    try:
        with open(os.path.join(directory, "firepool-probe"), "w") as fh:
            fh.write("x")
        out["write"][directory] = "wrote"
    except OSError as exc:
        out["write"][directory] = type(exc).__name__
for name, (host, port) in {
    "host loopback postgres": ("127.0.0.1", 5432),
    "host loopback mariadb": ("127.0.0.1", 3306),
    "node gateway postgres": (gateway, 5432),
}.items():
    probe = socket.socket()
    probe.settimeout(2)
    out["connect"][name] = "connected" if probe.connect_ex((host, port)) == 0 else "refused"
request = urllib.request.Request(f"http://{other_agent}/v1/attempts", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, timeout=5)
    out["connect"]["other agent launch"] = "accepted"
except urllib.error.HTTPError as exc:
    out["connect"]["other agent launch"] = exc.code
except OSError as exc:
    out["connect"]["other agent launch"] = type(exc).__name__
# The node's daemons are not in this container's PID namespace, so there is nothing to signal.
names = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            names.append(open(f"/proc/{p}/cmdline", "rb").read().split(b"\\0")[0].decode())
        except OSError:
            pass
out["signal"]["visible"] = sorted(set(names))
print(json.dumps(out))
"""


def test_a_job_reaches_nothing_that_is_not_its_own(
    node_broker: BrokerThread, real_node: KubeletNode
) -> None:
    with node_broker.client("bob") as bob:
        other_job = run(bob, command=["python", "-c", "pass"], lease_tag="b", timeout=120)
        other_pod = other_job["pods"][0]["name"]
    record = node_broker.run(node_broker.embedded.backend.get(other_pod))
    assert record is not None
    other_agent = record.agent_url.split("//")[-1]
    with node_broker.client("alice") as alice:
        job, seen = json_job(alice, PROBES, other_agent, real_node.gateway, lease_tag="a")
        assert job["pods"][0]["name"] != other_pod
        pod = job["pods"][0]["name"]
    assert seen["environment"] == []
    assert set(seen["read"].values()) == {"PermissionError"}, seen["read"]
    assert set(seen["write"].values()) <= {"PermissionError", "OSError"}, seen["write"]
    assert set(seen["connect"].values()) - {401} == {"refused"}, seen["connect"]
    assert seen["connect"]["other agent launch"] == 401
    visible = seen["signal"]["visible"]
    assert not [n for n in visible if "containerd" in n or "kubelet" in n or "pause" in n], visible
    assert settled(node_broker, pod, timeout=60) == "held"  # and the probes left nothing

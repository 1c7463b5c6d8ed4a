"""One rank of a `topology=ray` gang, run in the pod as the attempt's process.

Rank 0 starts a Ray head, waits until every rank's node has joined, runs the job's command as
the driver (with `RAY_ADDRESS`), and takes the cluster down when the driver exits, passing on
its exit status. Every other rank starts a Ray worker node that joins the head, and ends (exit
0) once the head is gone or the broker stops it: those ranks are infrastructure, the job is
rank 0's driver.

Every port comes from the attempt (`RayEnv.PORTS`), never Ray's defaults: on a host that runs
several pods, nodes share one IP and must not share a port (Ray tells nodes apart by id, not
address). The session directory goes under the pod's own temp dir, so a reset wipes it with
the pod's scratch space. The wrapper is a child subreaper: Ray's daemonized processes stay its
descendants, and it kills them all when it ends; the pod's reset kills whatever is left anyway.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from firepool.agent import procfs
from firepool.agent.zygote import set_subreaper
from firepool.protocol import RayEnv

#: Ray refuses an object store below 75 MiB (its OBJECT_STORE_MINIMUM_MEMORY_BYTES): a gang's
#: nodes get that unless the job asks for more, so a pod's memory goes to the job.
OBJECT_STORE_BYTES = 75 * 1024 * 1024
#: The head waits this long for every rank to join before giving up (exit 70).
JOIN_TIMEOUT_S = 180.0
#: A worker node whose head stopped answering this long ends.
HEAD_GONE_S = 3.0
EXIT_JOIN_FAILED = 70
EXIT_CONFIG = 78
#: Ray puts UNIX sockets at `<temp dir>/session_<date>_<time>_<usec>_<pid>/sockets/<name>`,
#: about 65 characters past the temp dir, and a socket path has room for 107.
MAX_TEMP_DIR = 40


@dataclass(frozen=True)
class Node:
    """What this rank was told by the attempt (all of it from `RayEnv` variables)."""

    rank: int
    world: int
    head: str  # host:port of the head's GCS
    ip: str
    ports: dict[str, int]
    worker_ports: list[int]
    num_gpus: int
    temp_dir: str

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Node:
        ports = json.loads(env[RayEnv.PORTS])
        workers = [int(p) for p in ports.pop("workers")]
        devices = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        return cls(
            rank=int(env["RANK"]),
            world=int(env["WORLD_SIZE"]),
            head=env[RayEnv.HEAD],
            ip=env[RayEnv.NODE_IP],
            ports={k: int(v) for k, v in ports.items()},
            worker_ports=workers,
            num_gpus=len(devices),
            temp_dir=os.path.join(env.get("TMPDIR") or "/tmp", "ray"),
        )

    def start_args(self) -> list[str]:
        """`ray start` for this node: every port pinned, one CPU, the smallest object store,
        no dashboard, no usage report."""
        p = self.ports
        args = [
            "start",
            f"--node-ip-address={self.ip}",
            f"--node-manager-port={p['node_manager']}",
            f"--object-manager-port={p['object_manager']}",
            f"--dashboard-agent-listen-port={p['dashboard_agent_listen']}",
            f"--dashboard-agent-grpc-port={p['dashboard_agent_grpc']}",
            f"--metrics-export-port={p['metrics_export']}",
            f"--runtime-env-agent-port={p['runtime_env_agent']}",
            f"--worker-port-list={','.join(map(str, self.worker_ports))}",
            "--num-cpus=1",
            f"--num-gpus={self.num_gpus}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--disable-usage-stats",
        ]
        if self.rank == 0:
            port = self.head.rsplit(":", 1)[1]
            return [
                *args,
                "--head",
                f"--port={port}",
                f"--ray-client-server-port={p['client_server']}",
                "--include-dashboard=false",
                f"--temp-dir={self.temp_dir}",
            ]
        return [*args, f"--address={self.head}", "--block"]


def wrap(argv: Sequence[str]) -> list[str]:
    """The argv that runs `argv` as one rank of a Ray gang, in this very interpreter (so the
    pod's warm interpreter can fork it)."""
    return [sys.executable, "-m", "firepool.agent.ray_node", "--", *argv]


def _ray() -> str:
    """The `ray` console script next to this interpreter (the pod's PATH may not have it)."""
    here = os.path.join(os.path.dirname(sys.executable), "ray")
    return here if os.path.exists(here) else "ray"


def _ray_env() -> dict[str, str]:
    """The environment for Ray's own processes: no RAY_ADDRESS (it is the driver's)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


def kill_descendants(grace_s: float = 2.0) -> None:
    """SIGTERM every descendant (Ray's daemons were re-parented to us), then SIGKILL those
    still alive after `grace_s`; reaps them."""
    me = os.getpid()
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        targets = procfs.descendants(procfs.snapshot(), [me]) - {me}
        for pid in targets:
            procfs.kill_quietly(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap()
            procs = procfs.snapshot()
            if not any(p in procs and not procs[p].dead for p in targets):
                break
            time.sleep(0.05)
    _reap()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def alive_nodes(head: str) -> int:
    """How many nodes the head's GCS counts alive. A private Ray API (there is no public one
    without a dashboard); tests/service/test_broker_ray_gangs.py breaks if it changes."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    infos = GcsClient(address=head).get_all_node_info(timeout=5)
    return sum(1 for info in infos.values() if info.state == 0)  # GcsNodeState.ALIVE


def head_reachable(head: str) -> bool:
    host, port = head.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


class _Stopped(Exception):
    pass


def _on_term(signum: int, frame: object) -> None:
    raise _Stopped


def run_head(node: Node, command: Sequence[str]) -> int:
    started = subprocess.run([_ray(), *node.start_args()], env=_ray_env(), check=False)
    if started.returncode != 0:
        print(f"firepool: ray start --head failed ({started.returncode})", file=sys.stderr)
        return started.returncode or 1
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    seen = 0
    while seen < node.world:
        try:
            seen = alive_nodes(node.head)
        except Exception as exc:  # the GCS client raises its own RPC errors
            print(f"firepool: asking the head for its nodes: {exc!r}", file=sys.stderr)
        if seen >= node.world:
            break
        if time.monotonic() > deadline:
            print(f"firepool: only {seen} of {node.world} Ray nodes joined within "
                  f"{JOIN_TIMEOUT_S:.0f} s", file=sys.stderr)
            return EXIT_JOIN_FAILED
        time.sleep(0.25)
    print(f"firepool: Ray cluster of {seen} nodes at {node.head}", file=sys.stderr, flush=True)
    driver = subprocess.Popen(list(command), env={**os.environ, "RAY_ADDRESS": node.head})
    try:
        return driver.wait()
    except _Stopped:
        driver.send_signal(signal.SIGTERM)
        try:
            return driver.wait(10.0)
        except subprocess.TimeoutExpired:
            driver.kill()
            return driver.wait()


def run_worker(node: Node) -> int:
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not head_reachable(node.head):  # the head may still be starting
        if time.monotonic() > deadline:
            print(f"firepool: the Ray head {node.head} did not come up within "
                  f"{JOIN_TIMEOUT_S:.0f} s", file=sys.stderr)
            return EXIT_JOIN_FAILED
        time.sleep(0.25)
    raylet = subprocess.Popen([_ray(), *node.start_args()], env=_ray_env())
    gone_since: float | None = None
    while True:
        code = raylet.poll()
        if code is not None:
            # The head went first (its driver ended): not this rank's failure.
            return 0 if not head_reachable(node.head) else code
        if head_reachable(node.head):
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since > HEAD_GONE_S:
            return 0
        time.sleep(0.5)


def main(argv: Sequence[str]) -> int:
    command = list(argv[1:] if argv and argv[0] == "--" else argv)
    node = Node.from_env(dict(os.environ))
    if node.rank == 0 and not command:
        print("firepool: a Ray gang needs a driver command", file=sys.stderr)
        return 2
    if node.rank == 0 and len(node.temp_dir) > MAX_TEMP_DIR:
        # Weak isolation gives each pod a TMPDIR deep in its directory: Ray's sockets would
        # not fit, and it would only say that its raylet timed out.
        print(f"firepool: Ray's temp dir {node.temp_dir} is longer than {MAX_TEMP_DIR} "
              "characters, too long for its sockets; Ray gangs need pods in private isolation "
              "(their own /tmp)", file=sys.stderr)
        return EXIT_CONFIG
    set_subreaper()
    signal.signal(signal.SIGTERM, _on_term)
    try:
        return run_head(node, command) if node.rank == 0 else run_worker(node)
    except _Stopped:
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_descendants()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The rank and rendezvous variables of a gang attempt, one dict per rank.

torchrun ranks get torchrun's variables and rendezvous at rank 0's pod. Ray ranks get what
`firepool.agent.ray_node` needs to start their node: the head's GCS address, the rank's own
address, a set of ports for each node (distinct across the gang, since local pods share one
IP), and a token that authenticates the gang's nodes and driver to each other (Ray's token
auth): nothing outside the attempt can join its cluster or submit to it. Rank 0 also gets
`RAY_ADDRESS`, for its driver.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
from collections.abc import Callable, Sequence

from firepool.model import Topology, UnavailableError
from firepool.protocol import RayEnv

#: Each Ray node's named ports (rank 0 also uses `client_server`); every port is pinned so two
#: nodes on one host never both take one of Ray's fixed defaults.
RAY_PORTS = (
    "node_manager",
    "object_manager",
    "dashboard_agent_listen",
    "dashboard_agent_grpc",
    "metrics_export",
    "runtime_env_agent",
    "client_server",
)
#: Ports for the node's worker processes (a gang node runs one CPU's worth of tasks, plus the
#: driver on rank 0).
RAY_WORKER_PORTS = 6


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on this host now (local pods share it; a cluster pod has its
    own IP). All are held at once while choosing, so none is handed out twice."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def gang_env(
    topology: Topology,
    addresses: Sequence[str],
    *,
    ports: Callable[[int], list[int]] = free_ports,
    token: Callable[[], str] = lambda: secrets.token_hex(32),
) -> list[dict[str, str]]:
    """Every rank's variables for a gang on pods at `addresses` (rank 0 first)."""
    world = len(addresses)
    if topology is Topology.NONE:
        return [{} for _ in addresses]
    master = addresses[0]
    per_node = len(RAY_PORTS) + RAY_WORKER_PORTS if topology is Topology.RAY else 0
    pool = iter(ports(1 + per_node * world))
    head_port = next(pool)
    ranks = [
        {"RANK": str(r), "WORLD_SIZE": str(world), "NODE_RANK": str(r)} for r in range(world)
    ]
    if topology is Topology.TORCHRUN:
        for env in ranks:
            env.update(MASTER_ADDR=master, MASTER_PORT=str(head_port), LOCAL_RANK="0",
                       LOCAL_WORLD_SIZE="1")
        return ranks
    if topology is Topology.RAY:
        head = f"{master}:{head_port}"
        secret = token()
        for r, env in enumerate(ranks):
            named: dict[str, object] = {name: next(pool) for name in RAY_PORTS}
            named["workers"] = [next(pool) for _ in range(RAY_WORKER_PORTS)]
            env.update({
                RayEnv.HEAD: head,
                RayEnv.NODE_IP: addresses[r],
                RayEnv.PORTS: json.dumps(named),
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": secret,
                "RAY_USAGE_STATS_ENABLED": "0",
            })
            if r == 0:
                env["RAY_ADDRESS"] = head
        return ranks
    raise UnavailableError(
        f"topology {topology.value} is not supported by this backend yet", field="topology"
    )

"""`python -m firepool.agent --config FILE [--listen-fd N]`: run the pod agent.

On Kubernetes the agent runs as `--config-env VAR` instead: its config is JSON in `VAR` and its
secret comes from `FIREPOOL_AGENT_SECRET`, which the pod fills from a Secret (secretKeyRef), so
the secret is in neither the pod spec nor a file the job could read from the image.

The backend passes an already-listening socket (`--listen-fd`), so the agent's URL is known
before the agent has even started and no port can be lost to a race; without it the agent
binds the configured host/port itself and writes the port to `<pod_dir>/agent.port`.
SIGTERM (or SIGINT) makes the agent kill every process of the pod and exit.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

from firepool.agent.layout import RESOLV_FILE
from firepool.agent.zygote import set_subreaper, start_process

#: Where `--config-env` finds the agent's secret (see backends/kubernetes/spec.py).
SECRET_ENV = "FIREPOOL_AGENT_SECRET"
_PR_SET_DUMPABLE = 4


def _hide_environment() -> None:
    """In a container the jobs run under the agent's own uid, and /proc/<agent>/environ still
    holds the secret the agent was started with. A non-dumpable process's /proc files belong
    to root, so the jobs cannot read it. Done after the zygote started: it is a fresh exec,
    dumpable as usual, and never had the secret."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to hide it from
        pass


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m firepool.agent")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config")
    source.add_argument("--config-env", help="read the config (JSON) from this variable")
    parser.add_argument("--listen-fd", type=int, default=None)
    args = parser.parse_args(argv)
    if args.config_env:
        raw = json.loads(os.environ.pop(args.config_env))
        raw["secret"] = os.environ.pop(SECRET_ENV)  # not inherited by the pod's jobs
        Path(raw["pod_dir"]).mkdir(parents=True, exist_ok=True)
    else:
        raw = json.loads(Path(args.config).read_text())
    if raw.get("devices_from_env") and not raw.get("devices"):
        from firepool.protocol import allocated_devices

        raw["devices"] = list(allocated_devices(os.environ.get(raw["devices_from_env"], "")))
    if "die-at-start" in raw.get("faults", ()):  # test hook: a pod that never becomes ready
        sys.exit(3)
    set_subreaper()
    # The warm interpreter starts now and imports its modules while we import pydantic: the
    # two start-ups overlap. Mounts made below are still seen by it (same mount namespace).
    # Private pods get a PID namespace whose init is the zygote (see pidns.py).
    # And a network namespace of their own, unless the backend gives them the host's (netns.py).
    own_pids = raw.get("isolation", "weak") != "weak" and os.geteuid() == 0
    network = raw.get("network", "host")
    zygote = start_process(
        list(raw.get("preload_modules", ())),
        pid_namespace=own_pids,
        net_namespace=own_pids and network != "host",
        resolv_conf=str(Path(raw["pod_dir"]) / RESOLV_FILE) if network == "egress" else None,
    )
    if args.config_env:
        _hide_environment()
    from firepool.agent.runtime import Agent
    from firepool.agent.server import AgentHTTPServer
    from firepool.protocol import AgentConfig

    config = AgentConfig.model_validate(raw)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s agent[{config.pod}] %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    agent = Agent(config, zygote)
    if args.listen_fd is not None:
        listen = socket.socket(fileno=args.listen_fd)
        server = AgentHTTPServer(agent, listen)
    else:
        server = AgentHTTPServer(agent, (config.host, config.port))
        port_file = Path(config.pod_dir) / "agent.port"
        port_file.with_suffix(".tmp").write_text(str(server.server_address[1]))
        os.replace(port_file.with_suffix(".tmp"), port_file)

    def _stop(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if config.broker_silence_s is not None:
        orphaned = threading.Event()

        def _watch() -> None:
            agent.watch_broker(orphaned)
            server.shutdown()  # serve_forever returns: the pod's processes end below

        threading.Thread(target=_watch, name="broker-silence", daemon=True).start()
    logging.getLogger("firepool.agent").info(
        "serving on %s:%s (isolation %s, memory limit %s)",
        *server.server_address[:2],
        agent.scratch.mode.value,
        agent.cgroups.mode.value,
    )
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        agent.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

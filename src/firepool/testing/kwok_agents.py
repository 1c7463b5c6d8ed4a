"""Real agents for kwok pods: the part of a node kwok leaves out, done on the host.

kwok moves a pod to Running and gives it an address, but starts no process, so a broker that
asks the pod's agent for its health (and the card it was given) has nobody to ask. This runs
the pod's own command, `python -m firepool.agent --config-env ...`, as a host process with
the environment the kubelet would build from the pod as the API server stored it: literal
values, the Secret the pod references, the pod's IP and node, and, for a pod that requests
`nvidia.com/gpu`, the device plugin's `NVIDIA_VISIBLE_DEVICES` (one card per pod, the node's
lowest free one). The agent binds the pod's IP, as it would inside the pod's own network
namespace, and keeps its files in a directory standing for the pod's emptyDir.

What the agent reports is therefore what the cluster decided, never a value the test passed.
Issue 29's real node runs the same pods under a real kubelet; until then this is the only way
to exercise the reported-devices path against a real API server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from firepool.backends.kubernetes.backend import KubernetesBackend
from firepool.backends.kubernetes.rest import Rest

GPU_RESOURCE = "nvidia.com/gpu"
DEVICE_PLUGIN_ENV = "NVIDIA_VISIBLE_DEVICES"


def card_name(node: str, index: int) -> str:
    """The UUID-like name the device plugin stand-in gives a node's card."""
    return f"GPU-{node}-{index}"


class PodAgents:
    """Starts one real agent per Running kwok pod of a backend, and stops them all."""

    def __init__(self, admin: Rest, namespace: str, root: Path) -> None:
        self.admin = admin
        self.namespace = namespace
        self.root = root
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        #: The card each GPU pod was given, as the device plugin's allocation.
        self.cards: dict[str, str] = {}

    async def follow(self, backend: KubernetesBackend, period_s: float = 0.05) -> None:
        """Until cancelled: start the agent of every pod that has an address and none yet."""
        while True:
            for name, pod in list(backend.cache.pods.items()):
                if name not in self.processes and (pod.get("status") or {}).get("podIP"):
                    await asyncio.to_thread(self.start, name)
            await asyncio.sleep(period_s)

    def start(self, name: str) -> None:
        """Run the pod's agent as its spec says (read from the server: the backend's cache
        keeps no container spec)."""
        path = f"/api/v1/namespaces/{self.namespace}/pods/{name}"
        pod = self.admin.request("GET", path, "read pod")
        (container,) = pod["spec"]["containers"]
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for item in container.get("env") or []:
            environment[item["name"]] = self._value(pod, item)
        limits = (container.get("resources") or {}).get("limits") or {}
        if GPU_RESOURCE in limits:
            card = self._allocate(pod["spec"]["nodeName"], int(limits[GPU_RESOURCE]))
            self.cards[name] = card
            environment[DEVICE_PLUGIN_ENV] = card
        command = list(container["command"])
        config_env = command[command.index("--config-env") + 1]
        config = json.loads(environment[config_env])
        config["host"] = pod["status"]["podIP"]  # 0.0.0.0 inside the pod's own netns
        config["pod_dir"] = str(self.root / name)  # its emptyDir
        environment[config_env] = json.dumps(config)
        log = (self.root / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [sys.executable, *command[1:]],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def _value(self, pod: dict[str, Any], item: dict[str, Any]) -> str:
        if "value" in item:
            return str(item["value"])
        source = item["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = self.admin.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/secrets/{ref['name']}", "read secret"
            )
            return base64.b64decode(secret["data"][ref["key"]]).decode()
        field = source["fieldRef"]["fieldPath"]
        if field == "status.podIP":
            return str(pod["status"]["podIP"])
        if field == "spec.nodeName":
            return str(pod["spec"]["nodeName"])
        raise ValueError(f"pod {pod['metadata']['name']}: no stand-in for env from {source}")

    def _allocate(self, node: str, count: int) -> str:
        if count != 1:
            raise ValueError(f"the device plugin stand-in gives one card per pod, not {count}")
        taken = set(self.cards.values())
        index = 0
        while card_name(node, index) in taken:
            index += 1
        return card_name(node, index)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

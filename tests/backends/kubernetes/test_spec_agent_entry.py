"""The container's entry point, for real: the agent started the way the pod spec starts it
(`--config-env`, secret from its own variable) serves health to the secret and nobody else,
and its jobs inherit neither variable."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from firepool.backends.agent_client import AgentClient
from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.settings import KubernetesSettings, PodTemplate
from firepool.backends.kubernetes.spec import CONFIG_ENV, SECRET_ENV, PodPlan, build_pod
from firepool.model import PodRole
from firepool.testing.control import cpu_pool

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(command: list[str], env: dict[str, str], uid: int | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, user=uid, group=uid
    )


def test_agent_runs_from_the_pod_specs_environment() -> None:
    port = free_port()
    settings = KubernetesSettings(agent_port=port)
    secret = "pod-secret-" + "x" * 20
    plan = PodPlan(
        name="cpu-entry",
        pool=cpu_pool(memory_mib_per_pod=512),
        role=PodRole.ACTIVE,
        secret=secret,
        created_at=0.0,
        annotations={},
        template=PodTemplate(),
    )
    pod = build_pod(settings, AnnotationCodec(settings.prefix), plan)
    container = pod["spec"]["containers"][0]
    values = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    config = json.loads(values[CONFIG_ENV])
    # As in the container, run the agent (and the peeking job) as a non-root uid, where this
    # interpreter lets another uid run it; root would read any process's environment anyway.
    nobody: int | None = 65534 if os.geteuid() == 0 else None
    work = Path(tempfile.mkdtemp(prefix="fp-k8s-entry-", dir="/tmp"))  # reachable by that uid
    work.chmod(0o777)
    config.update(host="127.0.0.1", pod_dir=str(work / "pod"))  # no root, no 0.0.0.0 here
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIREPOOL_")}
    env.update({CONFIG_ENV: json.dumps(config), SECRET_ENV: secret})
    command = [sys.executable, *container["command"][1:]]
    try:
        proc = start(command, env, nobody)
    except PermissionError:  # the interpreter lives where only its owner may go
        nobody = None
        proc = start(command, env, None)
    try:

        async def check() -> None:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            async with AgentClient(url, secret) as client:
                while True:
                    try:
                        health = await client.health()
                        if health.ready:
                            break
                    except Exception:
                        if time.monotonic() > deadline or proc.poll() is not None:
                            raise
                    await asyncio.sleep(0.1)
                assert health.pod == "cpu-entry" and health.ok
            async with httpx.AsyncClient() as plain:
                answer = await plain.get(f"{url}/health", headers={"Authorization": "Bearer no"})
                assert answer.status_code == 401

        asyncio.run(check())
        if nobody is not None:
            # A job runs as the agent's uid: it must not read the secret from the agent's
            # initial environment.
            peek = subprocess.run(
                [sys.executable, "-c", f"open('/proc/{proc.pid}/environ','rb').read()"],
                user=nobody,
                group=nobody,
                capture_output=True,
                check=False,
            )
            assert peek.returncode != 0 and b"PermissionError" in peek.stderr
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    assert proc.returncode == 0, out.decode(errors="replace")[-2000:]

"""The pool image, run: unpacked and entered as a container runtime would (namespaces, chroot,
the image's user, working directory and environment), its own command starts the agent
from the pod spec's environment and the agent answers its health; the interpreter inside
imports the agent's dependencies and none of the broker's; and a private containerd imports
the archive under the name a pod asks for and runs it (runc)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_chroot import command, environment, image_pid, require_containers, run
from oci_reader import Image

from firepool.backends.agent_client import AgentClient
from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.settings import KubernetesSettings, PodTemplate
from firepool.backends.kubernetes.spec import CONFIG_ENV, SECRET_ENV, PodPlan, build_pod
from firepool.image import BuiltImage
from firepool.model import PodRole
from firepool.testing.control import cpu_pool
from firepool.testing.host import needs

pytestmark = pytest.mark.timeout(240)

PROBE = """
import getpass, importlib.util, json, os, ssl, sys
print(json.dumps({
    "prefix": sys.prefix, "executable": sys.executable, "uid": os.getuid(), "gid": os.getgid(),
    "user": getpass.getuser(), "cwd": os.getcwd(),
    "found": {m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]},
    "cas": ssl.create_default_context().cert_store_stats()["x509_ca"],
}))
"""
AGENT_MODULES = ["firepool.agent.runtime", "pydantic", "pydantic_core", "httptools"]
BROKER_MODULES = ["fastapi", "sqlalchemy", "numpy", "uvicorn", "typer"]


@pytest.fixture(scope="module")
def rootfs(pool_image: Image, tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_containers()
    root = tmp_path_factory.mktemp("pool-rootfs") / "root"
    root.mkdir()
    pool_image.unpack(root)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def probe_result(output: str) -> dict[str, object]:
    result: dict[str, object] = json.loads(output.strip().splitlines()[-1])
    return result


def test_the_agent_starts_from_the_images_command_as_its_user(
    pool_image: Image, rootfs: Path
) -> None:
    config = pool_image.config["config"]
    port = free_port()
    settings = KubernetesSettings(agent_port=port)
    secret = "pod-secret-" + "y" * 20
    plan = PodPlan(
        name="cpu-image",
        pool=cpu_pool(memory_mib_per_pod=512),
        role=PodRole.ACTIVE,
        secret=secret,
        created_at=0.0,
        annotations={},
        template=PodTemplate(),
    )
    container = build_pod(settings, AnnotationCodec(settings.prefix), plan)["spec"]["containers"][0]
    # The pod spec runs the image's own command, as the image's own user.
    assert container["command"] == config["Cmd"]
    assert f"{container['securityContext']['runAsUser']}:" in config["User"] + ":"
    values = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    agent_config = json.loads(values[CONFIG_ENV])
    agent_config["host"] = "127.0.0.1"  # this "container" shares the host's network
    env = environment(config, {CONFIG_ENV: json.dumps(agent_config), SECRET_ENV: secret})
    proc = subprocess.Popen(
        command(rootfs, config, container["command"]), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        async def ready() -> None:
            deadline = time.monotonic() + 60
            async with AgentClient(f"http://127.0.0.1:{port}", secret) as client:
                while True:
                    try:
                        health = await client.health()
                        if health.ready:
                            break
                    except Exception:
                        if time.monotonic() > deadline or proc.poll() is not None:
                            raise
                    await asyncio.sleep(0.1)
            assert health.pod == "cpu-image" and health.ok

        asyncio.run(ready())
        agent = image_pid(proc.pid)
        assert agent is not None
        status = Path(f"/proc/{agent}/status").read_text()
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert set(uids) == {config["User"].split(":")[0]}
        assert os.readlink(f"/proc/{agent}/root") == str(rootfs)
        assert os.readlink(f"/proc/{agent}/exe") == str(rootfs / "opt/firepool/bin/python3.11")
        os.kill(agent, signal.SIGTERM)  # as the kubelet stops a pod: the agent ends its pod
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()  # and with it (--kill-child) the namespace and all its processes
            proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode(errors="replace")[-3000:]


def test_the_interpreter_inside_has_the_agents_imports_and_none_of_the_brokers(
    pool_image: Image, rootfs: Path
) -> None:
    config = pool_image.config["config"]
    done = run(rootfs, config, ["python", "-c", PROBE, *AGENT_MODULES, *BROKER_MODULES])
    assert done.returncode == 0, done.stdout + done.stderr
    result = probe_result(done.stdout)
    uid = int(config["User"].split(":")[0])
    assert result["prefix"] == "/opt/firepool"
    assert result["executable"] == "/opt/firepool/bin/python"
    assert (result["uid"], result["gid"], result["user"]) == (uid, uid, "firepool")
    assert result["cwd"] == config["WorkingDir"]
    assert result["found"] == {**dict.fromkeys(AGENT_MODULES, True),
                               **dict.fromkeys(BROKER_MODULES, False)}  # fmt: skip
    assert isinstance(result["cas"], int) and result["cas"] > 0  # ssl finds the CA bundle


@pytest.fixture
def containerd() -> Iterator[tuple[str, str]]:
    """A containerd of this test's own (root, state and socket in a new directory; no CRI),
    and ctr."""
    if os.geteuid() != 0:
        needs("root (a private containerd)")
    daemon, ctr = shutil.which("containerd"), shutil.which("ctr")
    if daemon is None or ctr is None:
        needs("containerd and ctr")
    assert daemon is not None and ctr is not None
    # A unix socket's path holds at most 107 bytes: a short directory of its own under /tmp.
    base = Path(tempfile.mkdtemp(prefix="fp-ctrd-", dir="/tmp"))
    socket_path = base / "containerd.sock"
    (base / "config.toml").write_text(
        f"""version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{socket_path}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"
"""
    )
    log = (base / "containerd.log").open("wb")
    proc = subprocess.Popen(
        [daemon, "--config", str(base / "config.toml")], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(
            [ctr, "--address", str(socket_path), "version"], capture_output=True, check=False
        ).returncode:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((base / "containerd.log").read_text()[-3000:])
            time.sleep(0.1)
        yield ctr, str(socket_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def test_containerd_imports_the_archive_under_the_pods_name_and_runs_it(
    pool_build: BuiltImage, containerd: tuple[str, str]
) -> None:
    ctr, address = containerd
    base = [ctr, "--address", address, "-n", "k8s.io"]
    imported = subprocess.run(
        [*base, "images", "import", "--snapshotter", "native", str(pool_build.path)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    listed = subprocess.run(
        [*base, "images", "ls"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    rows = [line.split() for line in listed.splitlines()[1:]]
    assert [pool_build.name, pool_build.digest] in [row[:1] + row[2:3] for row in rows]
    if shutil.which("runc") is None:
        needs("runc (to run the imported image)")
    ran = subprocess.run(
        [*base, "run", "--rm", "--net-host", "--snapshotter", "native", pool_build.name,
         "fp-image-test", "python", "-c", PROBE, *AGENT_MODULES, *BROKER_MODULES],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = probe_result(ran.stdout)
    assert (result["uid"], result["cwd"]) == (10001, "/var/lib/firepool/pod")
    assert result["found"] == {**dict.fromkeys(AGENT_MODULES, True),
                               **dict.fromkeys(BROKER_MODULES, False)}  # fmt: skip

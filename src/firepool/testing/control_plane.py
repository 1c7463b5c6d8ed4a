"""A real Kubernetes control plane on 127.0.0.1 for the test suite and the benchmarks.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built from Go modules by
`tools/k8s/build.sh` into a cache outside the tree, run here as child processes with their own
certificates in a scratch directory: nothing is shared with another run on the machine, and
`stop()` leaves nothing behind. kwok plays kubelet for nodes annotated
`kwok.x-k8s.io/node=fake` (`testing.kwok.kwok_node`), so pods reach Running without a process.

Used by `tests/k8s/conftest.py` (one plane per session) and `bench kubernetes`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from firepool.testing.certificates import CertificateAuthority, KeyPair, signing_key_pair
from firepool.testing.kwok import KWOK_ANNOTATION
from firepool.testing.private_db import free_port

#: The recipe's place in a source checkout (an editable install finds it from here).
RECIPE = Path(__file__).resolve().parents[3] / "tools" / "k8s" / "build.sh"
SERVICE_RANGE = "10.96.0.0/16"
POD_RANGE = "127.1.0.0/16"
_START_TIMEOUT_S = 120.0
KWOK_STAGES = Path(__file__).with_name("kwok_stages.yaml")


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started; the message names the step and shows
    the end of that component's log."""


def build_binaries(recipe: Path = RECIPE) -> Path:
    """The directory of the built binaries: FIREPOOL_K8S_BIN if set, else the recipe's cache
    (the first call on a machine builds them, which takes a while)."""
    given = os.environ.get("FIREPOOL_K8S_BIN")
    if given:
        return Path(given)
    if not recipe.exists():
        raise ControlPlaneError(f"no build recipe at {recipe}: run from a source checkout")
    if shutil.which("go") is None:
        raise ControlPlaneError("the `go` command is not on PATH: it builds the control plane")
    done = subprocess.run(["bash", str(recipe)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"{recipe} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class ControlPlane:
    """One private cluster. `start()` it, use `kubeconfig` (cluster-admin), `stop()` it."""

    bin: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="firepool-k8s-")))
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    etcd_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    # ------------------------------------------------------------------ start / stop

    def start(self) -> ControlPlane:
        try:
            self._certificates()
            self._start_etcd()
            self._start_apiserver()
            self._wait_api()
            for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
                self._spawn(component, self._args(component))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every component (the last started first) and remove the scratch directory."""
        for name in reversed(list(self.processes)):
            self._halt(name)
        self.processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def restart_apiserver(self) -> None:
        """Stop the API server and start it again on the same port: open watches break."""
        self._halt("kube-apiserver")
        self._start_apiserver()
        self._wait_api()

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (as its periodic compaction would, at once):
        every older resourceVersion is gone, so watches and `continue` tokens from before
        get 410 Gone. Returns the revision."""
        status = self._etcd("/v3/maintenance/status", {})
        revision = int(status["header"]["revision"])
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: dict[str, object]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            result: dict[str, Any] = json.loads(answer.read())
        return result

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def log_tail(self, name: str, size: int = 3000) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-size:] if path.exists() else "(no log)"

    # ------------------------------------------------------------------ pieces

    def _certificates(self) -> None:
        pki = self.root / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        self.ca = CertificateAuthority(pki)
        self.serving = self.ca.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            hosts=(
                "127.0.0.1", "localhost", "10.96.0.1", "kubernetes", "kubernetes.default",
                "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
            ),
        )  # fmt: skip
        self.admin = self.ca.issue("admin", "firepool-admin", organization="system:masters")
        self.service_accounts = signing_key_pair(pki)
        write_kubeconfig(self.kubeconfig, self.server, self.ca.pair.cert, client=self.admin)

    def _start_etcd(self) -> None:
        peer = free_port()
        self._spawn(
            "etcd",
            [
                "--name=fp-test",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=fp-test=http://127.0.0.1:{peer}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync",  # a test cluster: a crash loses it whole anyway
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        self._spawn("kube-apiserver", self._args("kube-apiserver"))

    def _args(self, component: str) -> list[str]:
        pki = self.ca.pair
        common = [f"--kubeconfig={self.kubeconfig}", "--v=1"]
        if component == "kube-apiserver":
            return [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.root / 'apiserver'}",
                f"--tls-cert-file={self.serving.cert}",
                f"--tls-private-key-file={self.serving.key}",
                f"--client-ca-file={pki.cert}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.service_accounts.cert}",
                f"--service-account-signing-key-file={self.service_accounts.key}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",  # no Endpoints for 127.0.0.1 to keep up
                "--v=1",
            ]
        if component == "kube-controller-manager":
            return [
                *common,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={self.service_accounts.key}",
                f"--root-ca-file={pki.cert}",
                f"--cluster-signing-cert-file={pki.cert}",
                f"--cluster-signing-key-file={pki.key}",
                "--use-service-account-credentials=false",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                # No cloud: the cloud controllers are not built into this manager.
            ]
        if component == "kube-scheduler":
            return [
                *common,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ]
        if component == "kwok":
            return [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={KWOK_STAGES}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                f"--server-address=127.0.0.1:{free_port()}",
                "--node-lease-duration-seconds=40",
                # Pod IPs on loopback: a test can bind a real agent to a kwok pod's address.
                f"--cidr={POD_RANGE}",
            ]
        raise ValueError(component)

    def _spawn(self, name: str, args: list[str]) -> None:
        binary = self.bin / name
        if not binary.exists():
            raise ControlPlaneError(f"{binary} is missing: build it with {RECIPE}")
        log = (self.root / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [str(binary), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C of the test run reaches us, not them
        )
        log.close()

    def _halt(self, name: str) -> None:
        process = self.processes.get(name)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(10)

    def _wait_api(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca.pair.cert))
        context.load_cert_chain(str(self.admin.cert), str(self.admin.key))
        deadline = time.monotonic() + _START_TIMEOUT_S
        problem = "not started"
        while time.monotonic() < deadline:
            for name in ("etcd", "kube-apiserver"):
                process = self.processes.get(name)
                if process is not None and process.poll() is not None:
                    raise ControlPlaneError(
                        f"{name} exited with {process.returncode}:\n{self.log_tail(name)}"
                    )
            try:
                with urllib.request.urlopen(
                    f"{self.server}/readyz", context=context, timeout=5
                ) as answer:
                    if answer.status == 200:
                        return
            except OSError as err:
                problem = str(err)
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kube-apiserver not ready in {_START_TIMEOUT_S:.0f} s ({problem}):\n"
            f"{self.log_tail('kube-apiserver')}"
        )


def write_kubeconfig(
    path: Path,
    server: str,
    ca: Path,
    *,
    client: KeyPair | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """A kubeconfig for `server`, authenticating by client certificate or bearer token."""
    user: dict[str, str] = {}
    if client is not None:
        user = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    if token is not None:
        user = {"token": token}
    context: dict[str, str] = {"cluster": "fp-test", "user": "fp-test"}
    if namespace:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "fp-test", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "fp-test", "user": user}],
        "contexts": [{"name": "fp-test", "context": context}],
        "current-context": "fp-test",
    }
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


@contextlib.contextmanager
def running_control_plane() -> Iterator[ControlPlane]:
    """Build (once per machine) and start a private control plane; stop it on exit."""
    plane = ControlPlane(build_binaries())
    with plane:
        yield plane


def main(argv: list[str] | None = None) -> int:
    """`python -m firepool.testing.control_plane`: the tests' cluster, by hand, until Ctrl-C,
    with the kwok nodes the suite makes (to try the backend or `bench kubernetes` on it)."""
    import argparse

    from firepool.testing.kwok import ensure_node, kwok_node, rest_for

    parser = argparse.ArgumentParser(prog="python -m firepool.testing.control_plane")
    parser.add_argument("--kubeconfig", type=Path, default=Path("fp-plane.kubeconfig"),
                        help="where to copy the admin kubeconfig")  # fmt: skip
    parser.add_argument("--cpu-nodes", type=int, default=3)
    parser.add_argument("--gpu-nodes", type=int, default=2, help="8 x nvidia.com/gpu each")
    args = parser.parse_args(argv)
    with running_control_plane() as plane:
        shutil.copyfile(plane.kubeconfig, args.kubeconfig)
        args.kubeconfig.chmod(0o600)
        admin = rest_for(str(args.kubeconfig))
        for i in range(args.cpu_nodes):
            ensure_node(admin, kwok_node(f"fp-cpu-{i}"))
        for i in range(args.gpu_nodes):
            ensure_node(admin, kwok_node(f"fp-gpu-{i}", gpus=8, labels={"accelerator": "H100"}))
        admin.close()
        print(f"control plane at {plane.server}; KUBECONFIG={args.kubeconfig}  (Ctrl-C stops)")
        stops = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # waited for, so the plane is stopped
        signal.sigwait(stops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

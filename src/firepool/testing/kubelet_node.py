"""One real node for the test cluster: kubelet, containerd and runc, running real containers.

kwok nodes never run a process, so the pool image, the agent's start in a container, the
broker reaching pod IPs, the agents' callbacks, verified reset inside a container and a
container's OOM kill are exercised only here. The node joins a `ControlPlane` beside the kwok
nodes and is tainted (`TAINT`) so that only pods that tolerate it land on it.

What this machine needs, and why each piece is set as it is:
- containerd, runc and the CNI plugins from Debian's packages (`.ci/run` installs them); the
  kubelet from `tools/k8s/build.sh`; the sandbox's `pause` from `tools/k8s/build-node.sh`.
- containerd and the kubelet share one mount namespace of their own whose root is made
  rshared (the machine's `/` is private, and the kubelet's volume mounts must reach the
  containers); the namespace ends with them, and so do their mounts.
- root here lacks CAP_SYS_RESOURCE: containerd restricts oom_score_adj to what it may set.
- no systemd: cgroupfs driver, cgroup v1 allowed, and a cgroup root of the node's own so
  that its cgroups are told apart from another node's on the machine and removed at stop.
- no registry: images are OCI archives built here (`firepool.image`) and imported with ctr;
  pods use imagePullPolicy Never.
- pods get a resolv.conf of their own (no server: lookups fail at once, not after a timeout).
- the pod network is a CNI bridge of the node's own (a free /24 in 10.244.0.0/16, checked
  against the machine's routes); its gateway address is the node's InternalIP and where pods
  reach services on the host, such as the broker's callback URL. No iptables rule is written.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from firepool.testing.control_plane import ControlPlane, ControlPlaneError, write_kubeconfig

#: The node's recipe in a source checkout (`pause`; the kubelet is the control plane's).
NODE_RECIPE = Path(__file__).resolve().parents[3] / "tools" / "k8s" / "build-node.sh"

#: The taint and label that keep every other test's pods off the real node.
TAINT = "firepool.dev/real-node"
NODE_LABEL = "firepool.dev/real-node"
CNI_PLUGINS = Path("/usr/lib/cni")
PAUSE_IMAGE = "docker.io/firepool/pause:test"
_READY_TIMEOUT_S = 120.0
_CONTAINERD_NAMESPACE = "k8s.io"


class NodeError(ControlPlaneError):
    """The node cannot run on this machine, or did not start: the message names the missing
    piece or the failed step with the end of its log."""


def missing_host_pieces() -> list[str]:
    """What this machine lacks to run the node (empty when it can)."""
    missing = [tool for tool in ("containerd", "runc", "ctr", "unshare", "nsenter", "ip")
               if shutil.which(tool) is None]  # fmt: skip
    if not (CNI_PLUGINS / "bridge").exists() or not (CNI_PLUGINS / "host-local").exists():
        missing.append(f"the CNI bridge and host-local plugins in {CNI_PLUGINS}")
    if os.geteuid() != 0:
        missing.append("root (containerd and the kubelet run as root)")
    return missing


def build_node_binaries(recipe: Path = NODE_RECIPE) -> Path:
    """The directory holding `pause`: FIREPOOL_K8S_NODE_BIN if set, else the recipe's cache."""
    given = os.environ.get("FIREPOOL_K8S_NODE_BIN")
    if given:
        return Path(given)
    if not recipe.exists():
        raise NodeError(f"no build recipe at {recipe}: run from a source checkout")
    if shutil.which("go") is None:
        raise NodeError("the `go` command is not on PATH: it builds the node's pause")
    done = subprocess.run(["bash", str(recipe)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NodeError(f"{recipe} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _routes() -> list[ipaddress.IPv4Network]:
    shown = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    nets: list[ipaddress.IPv4Network] = []
    for line in shown.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast", "unreachable", "prohibit", "blackhole"):
            word = line.split()[1]
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(word, strict=False)
            if isinstance(net, ipaddress.IPv4Network) and net.prefixlen > 0:
                nets.append(net)
    return nets


def free_pod_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.244.0.0/16 that no route of this machine overlaps."""
    taken = _routes()
    candidates = list(ipaddress.IPv4Network("10.244.0.0/16").subnets(new_prefix=24))
    secrets.SystemRandom().shuffle(candidates)
    for subnet in candidates:
        if not any(subnet.overlaps(route) for route in taken):
            return subnet
    raise NodeError("no free /24 in 10.244.0.0/16 for the node's pod network")


@dataclass
class KubeletNode:
    """A node named `name` of `plane`. `start()` it with the images to import; `stop()` it."""

    plane: ControlPlane
    pause_bin: Path
    name: str = "fp-node-0"
    images: Sequence[Path] = ()
    root: Path = field(default_factory=lambda: Path())
    subnet: ipaddress.IPv4Network = field(default_factory=free_pod_subnet)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.root == Path():
            self.root = self.plane.root / f"node-{self.name}"
        self.tag = secrets.token_hex(3)
        self.bridge = f"fpn{self.tag}"
        self.cgroup_root = f"/firepool-node-{self.tag}"

    @property
    def gateway(self) -> str:
        """The bridge's address on the host: the node's InternalIP, and where pods reach the
        host's services (bind a broker here for its agents' callbacks)."""
        return str(next(self.subnet.hosts()))

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    # ------------------------------------------------------------------ start / stop

    def start(self) -> KubeletNode:
        missing = missing_host_pieces()
        if missing:
            raise NodeError("this machine cannot run the test node: missing " + ", ".join(missing))
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._bridge_up()
            self._start_holder()
            self._start_containerd()
            self.import_images([self._pause_archive(), *self.images])
            self._write_kubelet_files()
            self._make_cgroup_root()
            self.start_kubelet()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Every container, shim, the kubelet and containerd killed, their cgroups, bridge and
        files removed. The mounts went with the mount namespace."""
        self._halt("kubelet")
        self._kill_containers()
        self._kill_shims()
        for name in reversed(list(self.processes)):
            self._halt(name)
        self.processes.clear()
        self._remove_cgroups()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def start_kubelet(self) -> None:
        self._spawn_in_namespace(
            "kubelet",
            [
                str(self.plane.bin / "kubelet"),
                f"--config={self.root / 'kubelet.yaml'}",
                f"--kubeconfig={self.root / 'kubelet.kubeconfig'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.gateway}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--cert-dir={self.root / 'kubelet' / 'pki'}",
                f"--node-labels={NODE_LABEL}=true",
                f"--register-with-taints={TAINT}=true:NoSchedule",
                "--v=1",
            ],
        )

    def kill_kubelet(self) -> None:
        """SIGKILL the kubelet (its containers keep running, as on a real node)."""
        process = self.processes.pop("kubelet", None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)

    def import_images(self, archives: Sequence[Path]) -> None:
        for archive in archives:
            self._ctr("images", "import", "--no-unpack=false", str(archive))

    def remove_image(self, reference: str) -> None:
        self._ctr("images", "rm", reference)

    def image_names(self) -> set[str]:
        listed = self._ctr("images", "ls", "-q")
        return set(listed.split())

    def wait_ready(self, timeout: float = _READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self.processes.get("kubelet")
            if process is not None and process.poll() is not None:
                raise NodeError(
                    f"kubelet exited with {process.returncode}:\n{self.log_tail('kubelet')}"
                )
            if self._ready():
                return
            time.sleep(0.3)
        raise NodeError(
            f"node {self.name} not Ready in {timeout:.0f} s:\n{self.log_tail('kubelet')}"
        )

    def log_tail(self, name: str, size: int = 3000) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-size:] if path.exists() else "(no log)"

    def __enter__(self) -> KubeletNode:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ pieces

    def _bridge_up(self) -> None:
        prefix = f"{self.gateway}/{self.subnet.prefixlen}"
        for command in (
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", prefix, "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise NodeError(f"{' '.join(command)}: {done.stderr.strip()}")

    def _start_holder(self) -> None:
        """A process whose mount namespace the node's daemons join (rshared root)."""
        holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c",
             "mount --make-rshared / && echo ready && exec sleep infinity"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        assert holder.stdout is not None
        line = holder.stdout.readline()
        if line.strip() != b"ready":
            holder.kill()
            stderr = holder.stderr.read().decode() if holder.stderr else ""
            raise NodeError(f"a mount namespace for the node: {stderr.strip() or 'no answer'}")
        self.processes["holder"] = holder

    def _spawn_in_namespace(self, name: str, argv: list[str]) -> None:
        holder = self.processes["holder"]
        log = (self.root / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            ["nsenter", f"--target={holder.pid}", "--mount", "--", *argv],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        log.close()

    def _start_containerd(self) -> None:
        cni = self.root / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-firepool.conflist").write_text(json.dumps(self._cni_config()))
        (self.root / "containerd.toml").write_text(self._containerd_config())
        self._spawn_in_namespace(
            "containerd", ["containerd", f"--config={self.root / 'containerd.toml'}"]
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.processes["containerd"].poll() is not None:
                raise NodeError(f"containerd exited:\n{self.log_tail('containerd')}")
            if self.socket.exists() and self._ctr_ok("version"):
                return
            time.sleep(0.1)
        raise NodeError(f"containerd did not answer in 30 s:\n{self.log_tail('containerd')}")

    def _containerd_config(self) -> str:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        skipped = ["aufs", "btrfs", "zfs", "devmapper"]
        return "\n".join([
            "version = 2",
            f'root = "{self.root / "containerd" / "root"}"',
            f'state = "{self.root / "containerd" / "state"}"',
            "disabled_plugins = ["
            + ", ".join(f'"io.containerd.snapshotter.v1.{s}"' for s in skipped)
            + ', "io.containerd.internal.v1.tracing"]',
            "[grpc]", f'  address = "{self.socket}"',
            "[ttrpc]", f'  address = "{self.root / "containerd.ttrpc.sock"}"',
            "[debug]", f'  address = "{self.root / "containerd.debug.sock"}"', '  level = "warn"',
            "[metrics]", '  address = ""',
            f"[{cri}]",
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            "  restrict_oom_score_adj = true",  # root here lacks CAP_SYS_RESOURCE
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f"[{cri}.cni]",
            f'  bin_dir = "{CNI_PLUGINS}"',
            f'  conf_dir = "{self.root / "cni" / "net.d"}"',
            "",
        ])  # fmt: skip

    def _cni_config(self) -> dict[str, object]:
        return {
            "cniVersion": "1.0.0",
            "name": f"firepool-{self.tag}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,  # no iptables rule on the machine
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": str(self.subnet), "gateway": self.gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.root / "cni" / "ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        }

    def _write_kubelet_files(self) -> None:
        pki = self.root / "pki"
        pki.mkdir(exist_ok=True)
        pair = self.plane.ca.issue(
            f"node-{self.name}", f"system:node:{self.name}", organization="system:nodes"
        )
        write_kubeconfig(
            self.root / "kubelet.kubeconfig", self.plane.server, self.plane.ca.pair.cert,
            client=pair,
        )  # fmt: skip
        (self.root / "resolv.conf").write_text("options timeout:1 attempts:1\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.plane.ca.pair.cert)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "address": self.gateway,
            "port": 0,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "resolvConf": str(self.root / "resolv.conf"),
            "podCIDR": str(self.subnet),
            "makeIPTablesUtilChains": False,
            "serializeImagePulls": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            # This machine's disk is shared: no eviction for its free space, which the
            # kubelet cannot read through this VM's block device anyway.
            "evictionHard": {"memory.available": "1Mi"},
            "localStorageCapacityIsolation": False,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
            "fileCheckFrequency": "60s",
            "maxPods": 60,
            "podPidsLimit": 4096,
        }
        (self.root / "kubelet.yaml").write_text(json.dumps(config, indent=1))

    def _pause_archive(self) -> Path:
        from firepool.image import ImageConfig, write_oci_archive

        rootfs = self.root / "pause-rootfs"
        rootfs.mkdir(exist_ok=True)
        shutil.copy2(self.pause_bin / "pause", rootfs / "pause")
        archive = self.root / "pause.oci.tar"
        write_oci_archive(rootfs, ImageConfig(entrypoint=("/pause",), user="65535:65535"),
                          PAUSE_IMAGE, archive)  # fmt: skip
        return archive

    def _ctr(self, *args: str) -> str:
        done = subprocess.run(
            ["ctr", f"--address={self.socket}", f"--namespace={_CONTAINERD_NAMESPACE}", *args],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def _ctr_ok(self, *args: str) -> bool:
        try:
            self._ctr(*args)
        except (NodeError, subprocess.TimeoutExpired):
            return False
        return True

    def _ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.plane.ca.pair.cert))
        context.load_cert_chain(str(self.plane.admin.cert), str(self.plane.admin.key))
        url = f"{self.plane.server}/api/v1/nodes/{self.name}"
        try:
            with urllib.request.urlopen(url, context=context, timeout=5) as answer:
                node = json.loads(answer.read())
        except OSError:
            return False
        conditions = node.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _make_cgroup_root(self) -> None:
        """The kubelet's cgroup root in every v1 hierarchy (it insists that they exist)."""
        base = Path("/sys/fs/cgroup")
        for controller in os.listdir(base):
            if not (base / controller / "cgroup.procs").exists():
                continue
            directory = base / controller / self.cgroup_root.lstrip("/")
            directory.mkdir(exist_ok=True)
            for inherited in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset takes no task
                if (directory / inherited).exists():
                    (directory / inherited).write_text((base / controller / inherited).read_text())

    def _cgroup_dirs(self) -> list[Path]:
        base = Path("/sys/fs/cgroup")
        found = [base / c / self.cgroup_root.lstrip("/") for c in os.listdir(base)]
        return [d for d in found if d.is_dir()]

    def _kill_containers(self) -> None:
        """SIGKILL every process in the node's cgroups (its containers and their children)."""
        for _ in range(3):
            pids: set[int] = set()
            for directory in self._cgroup_dirs():
                for procs in directory.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError):
                        pids.update(int(p) for p in procs.read_text().split())
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def _kill_shims(self) -> None:
        marker = str(self.socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in argv and marker in argv:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)

    def _remove_cgroups(self) -> None:
        for directory in self._cgroup_dirs():
            for child in sorted(directory.rglob("*"), key=lambda p: -len(p.parts)):
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                directory.rmdir()

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

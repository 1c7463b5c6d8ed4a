"""Outbound access for an `egress` pool: public addresses only, through a user-space NAT.

slirp4netns (Debian's `slirp4netns`) attaches a tap device to the pod's namespace and turns the
jobs' packets into ordinary sockets of its own on the host, so the pod needs no veth, bridge,
iptables or address plan, and nothing on the host listens for it. It is started with the host's
loopback refused (`--disable-host-loopback`: its gateway address would otherwise be the host's
127.0.0.1) and sandboxed. slirp4netns was chosen over pasta because the pasta Debian 12 ships
cannot join a namespace given as `/proc/<pid>/ns/net`, and slirp4netns reports readiness and
stops with its parent through descriptors, which the agent needs and pasta's daemon mode lacks.

The NAT alone would still reach the host's other addresses and its neighbours (a service bound
to 0.0.0.0, the cloud's metadata endpoint, another machine of the cluster network). So routing
rules in the pod's namespace (which a job, unprivileged there, cannot change) prohibit every
private, shared, link-local, multicast and reserved range and every subnet the host has an
address on, and let through only the NAT's DNS forwarder. IPv6 gets no route at all.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: The NAT's own network (slirp4netns' default), its DNS forwarder in it.
NAT_CIDR = "10.0.2.0/24"
DNS_ADDRESS = "10.0.2.3"
#: Ranges a pod's egress never reaches (RFC 6890 special-purpose IPv4 space, less the global
#: unicast blocks), whatever the host's own addresses are.
REFUSED_V4 = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4",
    "240.0.0.0/4",
)  # fmt: skip
_RULE_PREF = 100
_READY_TIMEOUT_S = 10.0


class EgressUnavailable(RuntimeError):
    """The host cannot give this pod egress (no slirp4netns, or it failed to start)."""


def refused_networks(host_addresses: Iterable[tuple[str, int]]) -> list[str]:
    """Every IPv4 network a pod's egress must not reach: the special-purpose ranges and the
    subnet of each host address (`(address, prefix length)`), outermost kept, sorted."""
    nets = {ipaddress.IPv4Network(n) for n in REFUSED_V4}
    for address, prefix in host_addresses:
        ip = ipaddress.ip_address(address)
        if ip.version == 4:
            nets.add(ipaddress.IPv4Network(f"{address}/{prefix}", strict=False))
    outer = [n for n in nets if not any(o != n and n.subnet_of(o) for o in nets)]
    return [str(n) for n in sorted(outer)]


def rule_commands(refused: Iterable[str]) -> str:
    """`ip -batch` input for the pod's namespace: the DNS forwarder allowed, the rest refused
    (`prohibit`: a connect fails at once with EACCES, no packet leaves)."""
    lines = [f"rule add to {DNS_ADDRESS}/32 lookup main pref {_RULE_PREF - 1}"]
    lines += [f"rule add to {net} prohibit pref {_RULE_PREF}" for net in refused]
    return "\n".join(lines) + "\n"


def host_addresses() -> list[tuple[str, int]]:
    """The host's IPv4 addresses with their prefix lengths (from `ip -o -4 addr`)."""
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        cols = line.split()
        if "inet" in cols:
            address, prefix = cols[cols.index("inet") + 1].split("/")
            found.append((address, int(prefix)))
    return found


def resolv_conf() -> str:
    """The resolver configuration a job of an egress pod gets: the NAT's forwarder only."""
    return f"# firepool: egress through the pod's NAT\nnameserver {DNS_ADDRESS}\n"


@dataclass
class Egress:
    """A running NAT for one pod; `close` stops it (so does the agent's death: its exit pipe)."""

    proc: subprocess.Popen[bytes]
    exit_fd: int

    def close(self) -> None:
        if self.exit_fd >= 0:
            os.close(self.exit_fd)
            self.exit_fd = -1
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start(namespace_pid: int, log_path: Path) -> Egress:
    """Give the network namespace of `namespace_pid` (the zygote) egress; returns once the
    interface is configured and the rules are in place."""
    binary = shutil.which("slirp4netns")
    if binary is None:
        raise EgressUnavailable("network egress needs slirp4netns (Debian package slirp4netns)")
    refused = refused_networks(host_addresses())
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
    argv = [binary, "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox",
            f"--cidr={NAT_CIDR}", f"--ready-fd={ready_w}", f"--exit-fd={exit_r}",
            str(namespace_pid), "tap0"]  # fmt: skip
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(  # without the agent's environment (the pod's marker)
            argv,
            pass_fds=(ready_w, exit_r),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
        )
    os.close(ready_w)
    os.close(exit_r)
    egress = Egress(proc, exit_w)
    try:
        _wait_ready(ready_r, proc)
        subprocess.run(
            ["nsenter", f"--net=/proc/{namespace_pid}/ns/net", "ip", "-batch", "-"],
            input=rule_commands(refused).encode(),
            capture_output=True,
            check=True,
            timeout=_READY_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError, EgressUnavailable) as exc:
        egress.close()
        detail = (
            exc.stderr.decode(errors="replace")
            if isinstance(exc, subprocess.CalledProcessError) and exc.stderr
            else str(exc)
        )
        raise EgressUnavailable(f"cannot give the pod egress: {detail}") from None
    finally:
        os.close(ready_r)
    return egress


def _wait_ready(ready_r: int, proc: subprocess.Popen[bytes]) -> None:
    import select

    readable, _, _ = select.select([ready_r], [], [], _READY_TIMEOUT_S)
    if not readable or os.read(ready_r, 1) != b"1":
        code = proc.poll()
        raise EgressUnavailable(
            f"slirp4netns {'exited with ' + str(code) if code is not None else 'not ready'}"
        )

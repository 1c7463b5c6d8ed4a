"""The pod's network namespace: its jobs see a loopback of their own and, by default, nothing else.

The agent stays in the host's network namespace, where the broker reaches it on its listening
socket and it reaches the broker's callback URL; only the warm interpreter and what it forks
(every job) live in the pod's namespace. That split needs no veth, no bridge and no unix-socket
transport for the agent's HTTP: the agent's socketpair to the zygote was made before the
namespace and keeps working across it. A job then cannot connect to anything on the host's
loopback (the broker's store, other pods' agents, other callers' jobs), and its `/proc/net/*`
lists only its own pod's sockets.

`enter_new` gives the calling thread a new namespace with `lo` up, the caller starts the zygote,
and `leave` returns the thread to the host's namespace; the namespace then lives as long as a
process inside it does (the zygote, the pod's init). An `egress` pool adds a user-space NAT on
top (`egress.py`).

`held_sockets` is what verified reset reads: every socket of the pod's namespace that a process
still holds (a descriptor on it: inode non-zero), so a listener or a connection a job left behind
through a process that outlived the kill rounds is reported, while TIME_WAIT remnants (held by
no one) are not. Stdlib only: the agent calls `enter_new` before it imports anything heavy.

The pod's namespace gets a TCP socket hash table of its own (`POD_TCP_HASH_BUCKETS`) where the
kernel offers one (Linux 6.1+, `tcp_child_ehash_entries`). Reading `/proc/net/tcp` and `tcp6`
walks every bucket of the namespace's table, and a namespace that shares the host's walks the
host's: 262,144 buckets on a 128 GiB machine, 2.1 ms of kernel time for the two files, about
a third of an agent's CPU per job, against 0.17 ms with 16,384 buckets of its own. The sysctl
applies to the namespaces created *from* the namespace that sets it, so `enter_new` sets it in
a first, throwaway namespace and creates the pod's from there: the host's setting, and every
other namespace on the host, stay as they were.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
#: `/proc/net/unix` flag of a listening socket.
_SO_ACCEPTCON = 0x00010000
#: TCP states by their `/proc/net/tcp` code, for the reset's message.
_TCP_STATES = {
    "01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
    "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK",
    "0A": "LISTEN", "0B": "CLOSING",
}  # fmt: skip
_INET_TABLES = ("tcp", "tcp6", "udp", "udp6", "raw", "raw6")
#: Buckets of the TCP socket hash table a pod's namespace gets of its own. Half of it bounds
#: the namespace's TIME_WAIT sockets (the kernel's rule for a private table); 16,384 keeps the
#: reset's walk over it near 0.1 ms and costs 128 KiB of kernel memory per pod.
POD_TCP_HASH_BUCKETS = 16384
#: Where a namespace says how large a table the namespaces created from it get (0: none).
CHILD_TCP_HASH = "/proc/sys/net/ipv4/tcp_child_ehash_entries"

_libc = ctypes.CDLL(None, use_errno=True)


def enter_new() -> int | None:
    """Move the calling thread into a new network namespace with its loopback up; returns a
    descriptor on the host's namespace for `leave`, or None where the host refuses one (not
    root, or a sandbox forbids it), the thread unchanged."""
    host = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    if _libc.unshare(CLONE_NEWNET) != 0:
        os.close(host)
        return None
    try:
        if _ask_own_tcp_hash(POD_TCP_HASH_BUCKETS):
            # The pod's namespace, created from the throwaway one (freed as the thread
            # leaves it). Should the kernel refuse, the throwaway one serves: the same
            # namespace, with the shared table.
            _libc.unshare(CLONE_NEWNET)
        loopback_up()
    except OSError:
        leave(host)
        raise
    return host


def _ask_own_tcp_hash(buckets: int) -> bool:
    """In the calling thread's (new) namespace: namespaces created from it get a TCP hash
    table of `buckets` of their own. False where the kernel has no such setting or refuses."""
    try:
        fd = os.open(CHILD_TCP_HASH, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, str(buckets).encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def leave(host: int) -> None:
    """The calling thread back in the host's namespace (raises if the kernel refuses)."""
    try:
        if _libc.setns(host, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns(host network namespace): {os.strerror(err)}")
    finally:
        os.close(host)


def loopback_up() -> None:
    """`ip link set lo up` in the calling thread's namespace (a new one starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def _endpoint(raw: str) -> str:
    """`0100007F:1F90` (or a 32-hex-digit IPv6 address) as `127.0.0.1:8080`."""
    addr, port = raw.split(":")
    packed = bytes.fromhex(addr)
    if len(packed) == 4:
        host = socket.inet_ntop(socket.AF_INET, packed[::-1])
    else:  # four host-order 32-bit words
        words = b"".join(packed[i : i + 4][::-1] for i in range(0, 16, 4))
        host = "[" + socket.inet_ntop(socket.AF_INET6, words) + "]"
    return f"{host}:{int(port, 16)}"


def held_sockets(net_dir: str, uid: int | None = None) -> list[str]:
    """Sockets in `net_dir` (a `/proc/<pid>/net` of the namespace) that a descriptor still holds,
    described for a reset's reason; only those of `uid` when given (the host's namespace,
    which other users share). Unix sockets count when they listen or carry a name."""
    found: list[str] = []
    for table in _INET_TABLES:
        try:
            with open(f"{net_dir}/{table}", "rb") as fh:
                lines = fh.read().decode().splitlines()[1:]
        except FileNotFoundError:  # no IPv6, or raw sockets not built in
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[9] == "0" or (uid is not None and cols[7] != str(uid)):
                continue
            state = _TCP_STATES.get(cols[3], cols[3]) if table.startswith("tcp") else "open"
            found.append(f"{table} {_endpoint(cols[1])} {state}")
    try:
        with open(f"{net_dir}/unix", "rb") as fh:
            unix = fh.read().decode(errors="replace").splitlines()[1:]
    except FileNotFoundError:
        unix = []
    for line in unix:
        cols = line.split()
        if len(cols) < 7 or cols[6] == "0":
            continue
        named = len(cols) > 7
        listening = int(cols[3], 16) & _SO_ACCEPTCON
        if uid is None and (named or listening):
            found.append(f"unix {cols[7] if named else '(unnamed)'} listening" if listening
                         else f"unix {cols[7]}")  # fmt: skip
    return found

"""The agent's side of the zygote: start it, ask it to spawn, receive exits.

One reader thread turns the zygote's event lines into calls: a spawn request waits for its
`spawned`/`spawn_error` answer; `exit` events go to the agent's exit callback; end of stream
means the zygote died, which makes the pod unhealthy.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from firepool.agent.zygote import start_process
from firepool.protocol import LaunchFailedError

log = logging.getLogger("firepool.agent")


@dataclass
class ZygoteExit:
    attempt: str
    pid: int
    status: int
    maxrss_kib: int
    t: float
    t0: float  # when the zygote started it (same monotonic clock)


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    answer: dict[str, Any] = field(default_factory=dict)


class ZygoteClient:
    def __init__(
        self,
        preload: tuple[str, ...],
        on_exit: Callable[[ZygoteExit], None],
        on_death: Callable[[], None],
        started: tuple[subprocess.Popen[bytes], socket.socket] | None = None,
    ) -> None:
        self._on_exit = on_exit
        self._on_death = on_death
        self.proc, self._sock = started if started is not None else start_process(preload)
        self._send_lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self.ready = threading.Event()
        #: A prefork was asked for and no spawn or discard has used it up since.
        self.spare = False
        self.modules: list[str] = []
        self.failed: dict[str, str] = {}
        #: Whether each job can get a /proc of the pod's PID namespace (known once ready).
        self.own_proc = False
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def join(self, cgroup_procs: list[str]) -> None:
        """Ask the zygote to move itself into the pod's cgroups before its first spawn (the
        socket keeps the order; the answer is only logged)."""
        if cgroup_procs:
            self._send({"op": "join", "cgroup_procs": cgroup_procs})

    def prefork(self, own_proc: bool) -> None:
        """Have the next spawn's child forked and prepared now (the zygote's `Spare`)."""
        self._send({"op": "prefork", "own_proc": own_proc})
        self.spare = True

    def discard(self) -> None:
        """Let an unused spare go before a reset sweeps the pod (the sweep would kill it
        anyway; this keeps the zygote from handing a dead one a request)."""
        if self.spare:
            self._send({"op": "discard"})
            self.spare = False

    def _send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message).encode() + b"\n"
        with self._send_lock:
            self._sock.sendall(line)

    def spawn(
        self, request: dict[str, Any], streams: tuple[int, int], timeout: float = 30.0
    ) -> tuple[int, float]:
        """Start a process through the zygote with `streams` (write ends of pipes) as its
        stdout and stderr; returns (pid, monotonic start time). The caller keeps its own
        copies of `streams` and closes them."""
        if not self.ready.wait(timeout):
            raise LaunchFailedError("the warm interpreter is not ready yet")
        pending = _Pending()
        self.spare = False
        with self._lock:
            self._pending[request["id"]] = pending
        try:
            line = json.dumps({"op": "spawn", **request}).encode() + b"\n"
            with self._send_lock:
                sent = socket.send_fds(self._sock, [line], list(streams))
                if sent < len(line):  # a signal cut the send short: the rest, fds are in
                    self._sock.sendall(line[sent:])
            if not pending.done.wait(timeout):
                raise LaunchFailedError("the warm interpreter did not answer the spawn request")
        except OSError as exc:
            raise LaunchFailedError(f"the warm interpreter is gone: {exc}") from None
        finally:
            with self._lock:
                self._pending.pop(request["id"], None)
        answer = pending.answer
        if answer.get("ev") != "spawned":
            raise LaunchFailedError(f"cannot start {request['argv'][0]!r}: {answer.get('message')}")
        return int(answer["pid"]), float(answer["t"])

    def _read(self) -> None:
        stream = self._sock.makefile("rb")
        try:
            for line in stream:
                self._dispatch(json.loads(line))
        except (OSError, ValueError) as exc:
            log.error("zygote stream broke: %s", exc)
        finally:
            self.ready.clear()
            with self._lock:
                for pending in self._pending.values():
                    pending.answer = {"ev": "spawn_error", "message": "the warm interpreter died"}
                    pending.done.set()
            self._on_death()

    def _dispatch(self, event: dict[str, Any]) -> None:
        kind = event.get("ev")
        if kind == "ready":
            self.modules = list(event.get("modules", []))
            self.failed = dict(event.get("failed", {}))
            self.own_proc = bool(event.get("own_proc"))
            for name, why in self.failed.items():
                log.warning("preload of %s failed: %s", name, why)
            self.ready.set()
        elif kind == "joined":
            if event.get("ok"):
                log.info("warm interpreter joined the pod's cgroups")
            else:
                log.warning("warm interpreter could not join the pod's cgroups (%s); each job "
                            "joins them itself", event.get("error"))  # fmt: skip
        elif kind in ("spawned", "spawn_error"):
            with self._lock:
                pending = self._pending.get(event["id"])
            if pending is not None:
                pending.answer = event
                pending.done.set()
        elif kind == "exit":
            self._on_exit(
                ZygoteExit(
                    attempt=event["id"],
                    pid=int(event["pid"]),
                    status=int(event["status"]),
                    maxrss_kib=int(event.get("maxrss_kib", 0)),
                    t=float(event["t"]),
                    t0=float(event.get("t0", event["t"])),
                )
            )

    def close(self) -> None:
        """Kill the zygote (the agent is shutting down; jobs are killed separately)."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            log.error("zygote %d did not die", self.proc.pid)
        self._sock.close()

"""A TCP relay on 127.0.0.1 that a test can make fail the ways a network does.

The backend under test talks to the API server through it (TLS passes through untouched:
the server's certificate names 127.0.0.1). `freeze()` stops moving bytes on every open
connection without closing it, as a NAT or load balancer that lost its state does: no FIN,
no RST, the client learns nothing. `cut()` also refuses new connections until `heal()`.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[tuple[socket.socket, socket.socket, threading.Event]] = []
        #: Frozen connections' sockets, held so that no garbage collection closes them.
        self._frozen: list[tuple[socket.socket, socket.socket]] = []
        self._refusing = False
        self._closed = False
        self.accepted = 0
        threading.Thread(target=self._accept, name="tcp-relay", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def freeze(self) -> None:
        """Every open connection goes silent for good; new ones work."""
        with self._lock:
            for client, upstream, frozen in self._open:
                frozen.set()
                self._frozen.append((client, upstream))
            self._open.clear()

    def cut(self) -> None:
        """Freeze the open connections and refuse new ones until `heal()`."""
        with self._lock:
            self._refusing = True
        self.freeze()

    def heal(self) -> None:
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.freeze()
        with self._lock:
            for pair in self._frozen:
                for end in pair:
                    with contextlib.suppress(OSError):
                        end.close()
            self._frozen.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            frozen = threading.Event()
            with self._lock:
                self._open.append((client, upstream, frozen))
                self.accepted += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=_pump, args=(source, sink, frozen), name="tcp-relay-pump", daemon=True
                ).start()


def _pump(source: socket.socket, sink: socket.socket, frozen: threading.Event) -> None:
    """Copy bytes until either side closes; once frozen, hold both sockets open and move
    nothing (the peers see a connection that went quiet, never one that ended)."""
    source.settimeout(0.1)
    try:
        while not frozen.is_set():
            try:
                data = source.recv(65536)
            except TimeoutError:
                continue
            if not data:
                break
            if frozen.is_set():
                break
            sink.sendall(data)
    except OSError:
        pass
    if frozen.is_set():
        return  # the relay holds the sockets open: closing them would tell the peers
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            end.close()

"""The agent's HTTP face: stdlib `http.server`, one thread per connection, keep-alive.

Deliberately not an ASGI stack: the agent must start in well under a second in every pod and
serves a handful of requests per attempt. Responses are written in one `send` with Nagle off,
so a small request costs a fraction of a millisecond on loopback.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import re
import socket
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ValidationError

from firepool.agent.request_head import HeadError, read_head
from firepool.agent.runtime import Agent
from firepool.model import (
    ErrorCode,
    FirepoolError,
    NotFoundError,
    PayloadTooLargeError,
    RequestValidationError,
    UnauthorizedError,
)
from firepool.protocol import (
    AttemptPhase,
    LaunchRequest,
    LogAck,
    ResetRequest,
    StopReason,
    StopRequest,
)

log = logging.getLogger("firepool.agent")

_STATUS: dict[ErrorCode, int] = {
    ErrorCode.VALIDATION: 422,
    ErrorCode.FORBIDDEN_ENV: 422,
    ErrorCode.BAD_PACKAGE: 422,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNAVAILABLE: 503,
}
_MAX_BODY = 8 * 1024 * 1024
_BODY_TIMEOUT_S = 30.0
_ATTEMPT = r"/v1/attempts/(?P<attempt>[^/]+)"
#: The longest a status request waits for an exit: below any agent's silence bound (30 s at
#: the least), so a broker that keeps asking is never taken for a silent one.
MAX_WAIT_S = 20.0


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, agent: Agent, listen: socket.socket | tuple[str, int]) -> None:
        self.agent = agent
        if isinstance(listen, socket.socket):
            super().__init__(listen.getsockname()[:2], Handler, bind_and_activate=False)
            self.socket.close()
            self.socket = listen
            self.server_address = listen.getsockname()[:2]
        else:
            super().__init__(listen, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: AgentHTTPServer
    raw_requestline: bytes  # set by the stdlib's handle_one_request

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def parse_request(self) -> bool:
        """The stdlib's request parsing, but with httptools reading the head (see
        `request_head`): HTTP/1.0 and 1.1 only, keep-alive as they define it."""
        self.command = ""
        self.request_version = self.default_request_version
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        try:
            head = read_head(self.raw_requestline, self.rfile)
        except HeadError as exc:
            with contextlib.suppress(OSError):  # a client gone mid-head hears nothing
                self._json(exc.status, exc.to_dict())  # and the connection closes
            return False
        self.command, self.path, self.request_version = head.method, head.target, head.version
        self.headers = head.headers
        self.close_connection = not head.keep_alive
        expect = head.headers.get("Expect", "").lower()
        return expect != "100-continue" or head.version != "HTTP/1.1" or self.handle_expect_100()

    # ------------------------------------------------------------------ plumbing

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        head = (
            f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.wfile.write(head.encode() + body)
        self.log_request(status)

    def _json(self, status: int, payload: BaseModel | dict[str, Any]) -> None:
        if isinstance(payload, BaseModel):
            body = payload.model_dump_json().encode()
        else:
            body = json.dumps(payload).encode()
        self._send(status, body)

    def _body(self) -> dict[str, Any]:
        """The request's JSON object. Whatever is wrong with it is the caller's error, typed
        and naming what was wrong; the connection is closed when the body was not read."""
        header = self.headers.get("Content-Length") or "0"
        if not header.isdigit():
            self.close_connection = True
            raise RequestValidationError(
                f"Content-Length {header[:40]!r} is not a byte count", field="Content-Length"
            )
        length = int(header)
        if length > _MAX_BODY:
            self.close_connection = True
            raise PayloadTooLargeError(
                f"request body of {length} bytes, at most {_MAX_BODY}", field="body"
            )
        self.connection.settimeout(_BODY_TIMEOUT_S)  # a body promised but never sent
        try:
            raw = self.rfile.read(length) if length else b"{}"
        except TimeoutError:
            self.close_connection = True
            raise RequestValidationError(
                f"request body not received within {_BODY_TIMEOUT_S:g}s", field="body"
            ) from None
        finally:
            self.connection.settimeout(None)
        if len(raw) < length:
            self.close_connection = True
            raise RequestValidationError("request body shorter than Content-Length", field="body")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise RequestValidationError("request body is not JSON", field="body") from None
        if not isinstance(body, dict):
            raise RequestValidationError("request body must be a JSON object", field="body")
        return body

    def _authorized(self) -> bool:
        got = self.headers.get("Authorization", "")
        want = f"Bearer {self.server.agent.config.secret}"
        return hmac.compare_digest(got.encode(), want.encode())

    def _dispatch(self, routes: list[tuple[str, Callable[..., None]]]) -> None:
        url = urlsplit(self.path)
        try:
            if not self._authorized():
                raise UnauthorizedError("missing or wrong pod secret", field="Authorization")
            self.server.agent.touch()
            for pattern, fn in routes:
                match = re.fullmatch(pattern, url.path)
                if match:
                    fn(query=parse_qs(url.query), **match.groupdict())
                    return
            raise NotFoundError(f"no route {self.command} {url.path}")
        except FirepoolError as exc:
            self._json(_STATUS.get(exc.code, 500), exc.to_dict())
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "body"
            self._json(422, {"error": "ValidationError", "message": first["msg"], "field": field})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            log.exception("internal error")
            self._json(500, {"error": "InternalError", "message": str(exc), "field": None})

    def do_GET(self) -> None:
        self._dispatch(
            [
                (r"/v1/health", self._health),
                (_ATTEMPT, self._status),
                (_ATTEMPT + r"/logs", self._logs),
            ]
        )

    def do_POST(self) -> None:
        self._dispatch(
            [
                (r"/v1/attempts", self._launch),
                (_ATTEMPT + r"/stop", self._stop),
                (_ATTEMPT + r"/logs/ack", self._ack_logs),
                (r"/v1/reset", self._reset),
            ]
        )

    def _no_such_method(self) -> None:
        self.close_connection = True  # a body we do not read must not be taken as a request
        self._dispatch([])

    do_PUT = do_DELETE = do_PATCH = _no_such_method

    # ------------------------------------------------------------------ routes

    def _health(self, query: dict[str, list[str]]) -> None:
        self._json(200, self.server.agent.health())

    def _launch(self, query: dict[str, list[str]]) -> None:
        req = LaunchRequest.model_validate(self._body())
        self._json(200, self.server.agent.launch(req))

    def _status(self, query: dict[str, list[str]], attempt: str) -> None:
        """With `wait_s` (0 to `MAX_WAIT_S`), answered once the attempt exited or the time
        is up: the broker's long poll for an exit it asked not to have pushed."""
        wait_s = _seconds(query, "wait_s", MAX_WAIT_S)
        agent = self.server.agent
        self._json(200, agent.wait_status(attempt, wait_s) if wait_s else agent.status(attempt))

    def _stop(self, query: dict[str, list[str]], attempt: str) -> None:
        req = StopRequest.model_validate(self._body())
        reason = StopReason.FAULT if req.kill else StopReason.STOP
        self._json(200, self.server.agent.stop(attempt, req.grace_s, reason))

    def _reset(self, query: dict[str, list[str]]) -> None:
        req = ResetRequest.model_validate(self._body())
        self._json(200, self.server.agent.reset(await_logs_s=req.await_logs_s, logs=req.logs))

    def _ack_logs(self, query: dict[str, list[str]], attempt: str) -> None:
        ack = LogAck.model_validate(self._body())
        self._json(200, self.server.agent.ack_logs(attempt, ack))

    def _logs(self, query: dict[str, list[str]], attempt: str) -> None:
        """Chunked stream of a log file from `offset`; with follow=1, until the attempt exits."""
        agent = self.server.agent
        stream = query.get("stream", ["stdout"])[0]
        if stream not in ("stdout", "stderr", "install.log"):
            raise RequestValidationError(
                f"no log stream {stream[:40]!r}: stdout, stderr or install.log", field="stream"
            )
        raw_offset = query.get("offset", ["0"])[0]
        if not raw_offset.isdigit():
            raise RequestValidationError(
                f"offset {raw_offset[:40]!r} is not a byte offset (an integer >= 0)", field="offset"
            )
        offset = int(raw_offset)
        raw_follow = query.get("follow", ["0"])[0]
        if raw_follow not in ("0", "1", "true", "false"):
            raise RequestValidationError(
                f"follow {raw_follow[:40]!r}: 0, 1, true or false", field="follow"
            )
        follow = raw_follow in ("1", "true")
        agent.status(attempt)  # NotFound for an unknown attempt
        path = agent.layout.log_file(attempt, stream)
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        # The file appears with the stream's first byte (output.py): until then it is empty.
        fh = _open_log(path, offset)
        try:
            while True:
                data = fh.read(1 << 16) if fh is not None else b""
                if data:
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    continue
                if not follow or agent.status(attempt).phase is AttemptPhase.EXITED:
                    fh = fh or _open_log(path, offset)  # made since we last looked
                    if fh is not None and (rest := fh.read()):
                        self.wfile.write(f"{len(rest):x}\r\n".encode() + rest + b"\r\n")
                    break
                agent.wait_exit(attempt, 0.05)  # new output is polled; the exit wakes us
                fh = fh or _open_log(path, offset)
        except NotFoundError:
            pass  # reset removed the attempt while we followed it
        finally:
            if fh is not None:
                fh.close()
        self.wfile.write(b"0\r\n\r\n")


def _seconds(query: dict[str, list[str]], name: str, most: float) -> float:
    """A query parameter of seconds, 0 when absent; refused unless within [0, most]."""
    raw = query.get(name, ["0"])[0]
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= most:  # also refuses nan
        raise RequestValidationError(f"{name} is seconds from 0 to {most:g}, not {raw[:40]!r}",
                                     field=name)  # fmt: skip
    return value


def _open_log(path: Path, offset: int) -> BinaryIO | None:
    """The log file from `offset`, or None while the stream has not written a byte."""
    try:
        fh = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return None
    fh.seek(offset)
    return fh

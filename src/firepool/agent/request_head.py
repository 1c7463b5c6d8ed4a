"""The agent's request line and headers, parsed by httptools (llhttp, in C).

`http.server` hands each request's headers to the email package's parser, which took about a
twelfth of an agent's CPU under load (py-spy, `bench throughput`), for the three or four
requests of every job. The head is read here with the stdlib's limits (a line of at most
64 KiB, at most 100 headers) and parsed in one call. llhttp is stricter than the stdlib
(a Content-Length beside a Transfer-Encoding, a duplicate Content-Length, a folded header
are refused): whatever it refuses is answered as the agent answers any bad input, a typed
error naming what was wrong.
"""

from __future__ import annotations

import http.client
from typing import Protocol

import httptools

from firepool.model import RequestValidationError

MAX_LINE = 65536
MAX_HEADERS = 100


class _Lines(Protocol):
    def readline(self, size: int = -1, /) -> bytes: ...


class HeadError(RequestValidationError):
    """The request's head cannot be served: `status` says how to refuse it (422 for what
    the head says, 431 for its size, 505 for an HTTP version the agent does not speak)."""

    def __init__(self, status: int, message: str, field: str) -> None:
        super().__init__(message, field=field)
        self.status = status


class RequestHead:
    """What a request's line and headers say (and the callbacks that collect it)."""

    def __init__(self) -> None:
        self.method = ""
        self.target = ""
        self.version = ""
        self.keep_alive = False
        self.headers = http.client.HTTPMessage()
        self._url = b""
        self._complete = False
        self._parser: httptools.HttpRequestParser | None = None

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("iso-8859-1")] = value.decode("iso-8859-1")

    def on_headers_complete(self) -> None:
        # Read now: once a request without a body is complete, the parser is reset for
        # the next one and forgets (a `Connection: close` above all).
        assert self._parser is not None
        self.method = self._parser.get_method().decode("ascii")
        self.version = f"HTTP/{self._parser.get_http_version()}"
        self.keep_alive = self._parser.should_keep_alive()
        self._complete = True


def read_head(first_line: bytes, rfile: _Lines) -> RequestHead:
    """The head that begins with `first_line` (the request line, already read), reading the
    header lines from `rfile` up to the blank line that ends them."""
    lines = [first_line]
    while True:
        line = rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise HeadError(431, f"a header line longer than {MAX_LINE} bytes", "headers")
        lines.append(line)
        if line in (b"\r\n", b"\n", b""):
            break
        if len(lines) > MAX_HEADERS + 1:
            raise HeadError(431, f"more than {MAX_HEADERS} headers", "headers")
    head = RequestHead()
    head._parser = parser = httptools.HttpRequestParser(head)
    try:
        parser.feed_data(b"".join(lines))
    except httptools.HttpParserUpgrade:
        raise HeadError(422, "protocol upgrades are not served", "headers") from None
    except (httptools.HttpParserInvalidMethodError, httptools.HttpParserInvalidURLError) as exc:
        raise HeadError(422, f"bad request line: {exc}", "request line") from None
    except httptools.HttpParserError as exc:
        raise HeadError(422, f"bad request head: {exc}", _named_header(str(exc))) from None
    finally:
        head._parser = None  # the parser holds the head: no cycle left behind
    if not head._complete:
        raise HeadError(422, "the request's head ended before its blank line", "headers")
    head.target = head._url.decode("iso-8859-1")
    if head.version not in ("HTTP/1.0", "HTTP/1.1"):
        raise HeadError(505, f"{head.version} is not served: HTTP/1.0 or 1.1", "request line")
    return head


def _named_header(message: str) -> str:
    """The header llhttp's complaint names, if it names one the agent reads."""
    return next((h for h in ("Content-Length", "Transfer-Encoding") if h in message), "headers")

"""Serve an app with real uvicorn on a real socket, from a background thread.

Tests and benchmarks use this to exercise the API over actual HTTP (port 0: the kernel picks a
free port, so parallel runs never collide). The service has its own entry point.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp


class ServedApp:
    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        loop: str = "auto",
        http: str = "auto",
    ) -> None:
        # "auto" picks uvloop and httptools when installed, else asyncio and h11.
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            loop=loop,
            http=http,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="firepool-api", daemon=True)
        self.host = host
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ServedApp:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

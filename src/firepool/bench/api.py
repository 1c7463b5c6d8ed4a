"""API submissions per second and latency through real HTTP (SQLite store).

`python -m firepool.bench api [--clients 32] [--seconds 5] [--json PATH]`

The broker API runs in a child process (uvicorn on 127.0.0.1, port 0, its own data directory
and SQLite file); this process drives it with `--clients` concurrent keep-alive connections,
each submitting jobs back to back with a bearer token. Every submission is a durable QUEUED
row when its 201 arrives. Latency is measured per request at the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from firepool.bench.common import (
    cpu_seconds,
    machine,
    median,
    percentile,
    print_table,
    write_json,
)

TARGET_RATE = 1000.0
TARGET_P99_MS = 50.0


def _serve(data_dir: str, ready: Any, stop: Any) -> None:
    """Child process: build the real app over SQLite and serve it until told to stop."""
    from firepool.api import create_app, issue_token
    from firepool.api.server import ServedApp
    from firepool.model import PoolSpec
    from firepool.packages import DiskPackageStore
    from firepool.service.tuning import tune_gc_for_serving
    from firepool.store import open_store

    root = Path(data_dir)
    store = open_store(data_dir=root)
    app = create_app(
        store, DiskPackageStore(root / "packages"), [PoolSpec(name="cpu")], data_dir=root
    )
    token = issue_token(store, "bench")
    tune_gc_for_serving()  # as `firepool serve` does
    with ServedApp(app) as served:
        ready.put((served.url, token, os.getpid()))
        stop.wait()
    store.close()


class _Connection:
    """A minimal HTTP/1.1 keep-alive client for one connection.

    The load generator shares this 2-core machine with the server, so it must cost far less
    than the server per request; general-purpose async clients spend several times the
    server's own CPU per request and would measure themselves instead of the broker.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def post(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length)
        return status, body

    def close(self) -> None:
        self.writer.close()


def _request(host: str, port: int, token: str) -> bytes:
    body = json.dumps(
        {"pool": "cpu", "command": ["python", "main.py"], "env": {"SEED": "1"}}
    ).encode()
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _drive(
    url: str, token: str, clients: int, seconds: float
) -> tuple[int, list[float], float]:
    parsed = urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    request = _request(host, port, token)
    connections = [await _Connection.open(host, port) for _ in range(clients)]
    latencies: list[float] = []
    failures = 0
    try:
        for _ in range(3):  # warm the connections and the server's caches
            await asyncio.gather(*(c.post(request) for c in connections))
        deadline = time.perf_counter() + seconds

        async def client(connection: _Connection) -> None:
            nonlocal failures
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                status, _ = await connection.post(request)
                if status != 201:
                    failures += 1
                    continue
                latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        await asyncio.gather(*(client(c) for c in connections))
        elapsed = time.perf_counter() - began
    finally:
        for connection in connections:
            connection.close()
    return failures, latencies, elapsed


def run_once(clients: int, seconds: float) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    stop = context.Event()
    with tempfile.TemporaryDirectory() as tmp:
        child = context.Process(target=_serve, args=(tmp, ready, stop), daemon=True)
        child.start()
        try:
            url, token, pid = ready.get(timeout=60)
            before = cpu_seconds(pid)
            failures, latencies, elapsed = asyncio.run(_drive(url, token, clients, seconds))
            server_cpu = cpu_seconds(pid) - before
        finally:
            stop.set()
            child.join(timeout=30)
    if failures:
        raise RuntimeError(f"{failures} submissions failed")
    return {
        "submits_per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        # includes the warm-up requests, a small share: an upper bound per submission
        "server_cpu_us_per_submit": server_cpu / max(1, len(latencies)) * 1e6,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m firepool.bench api", description=__doc__)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=1, help="runs (median of each figure)")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    runs = [run_once(args.clients, args.seconds) for _ in range(args.repeats)]
    result: dict[str, object] = {
        key: round(median([r[key] for r in runs]), 2)
        for key in ("submits_per_s", "p50_ms", "p99_ms", "server_cpu_us_per_submit")
    }
    result.update(clients=args.clients, store="sqlite", **machine())
    print_table(
        f"API submissions over HTTP, {args.clients} clients, SQLite",
        [
            ("submits/s", f"{result['submits_per_s']:,.0f}", f">= {TARGET_RATE:,.0f}"),
            ("p50 latency (ms)", f"{result['p50_ms']:.1f}", ""),
            ("p99 latency (ms)", f"{result['p99_ms']:.1f}", f"<= {TARGET_P99_MS:.0f}"),
            ("server CPU per submission (us)", f"{result['server_cpu_us_per_submit']:.0f}", ""),
        ],
    )
    write_json(args.json_path, result)
    return 0

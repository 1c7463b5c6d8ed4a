"""Capacity sources: where the broker reads what reserved capacity it may borrow.

A capacity controller publishes, per accelerator model (or `cpu`), how many units its owners
have reserved but do not use (broker paper, section 7 and appendix A.7). The broker polls it
(default every 10 s) and feeds each reading to the core (`BrokerCore.capacity_changed`),
whose ledger limit becomes the broker's own budget plus the reading: a grant lets the scaler
create at once; a lower reading makes the core give back one unit per unit asked.

Two sources come in the box, both reading the same JSON object `{"H200": 2, "cpu": 0}`:
- `file:PATH`: a file the controller (or an operator) rewrites;
- `http://...` / `https://...`: a controller's endpoint answering that object to GET.
A reading that cannot be used (unreadable, not that object, a negative or fractional count)
is a typed ConfigError naming what was wrong; the broker logs it and keeps the last good
reading, so a controller's hiccup neither grants nor reclaims anything.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Protocol

import httpx

from firepool.model import ConfigError


class CapacitySource(Protocol):
    async def read(self) -> dict[str, int]:
        """Units the broker may borrow now, per budget resource (absent: none)."""
        ...


def parse_reading(data: Any, source: str) -> dict[str, int]:
    """A controller's reading as units per resource, or a ConfigError naming the bad key."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected an object of units per resource, like {{\"H200\": 2}}",
            field="capacity",
        )
    out: dict[str, int] = {}
    for key, value in data.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(
                f"{source}: {key!r} must be a whole number of units >= 0, got {value!r}",
                field=f"capacity.{key}",
            )
        out[str(key)] = value
    return out


class FileCapacitySource:
    """A JSON file rewritten by whoever grants the capacity (write it atomically: rename)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    async def read(self) -> dict[str, int]:
        return await asyncio.to_thread(self._read)

    def _read(self) -> dict[str, int]:
        try:
            text = self.path.read_text()
        except OSError as err:
            raise ConfigError(
                f"capacity file {self.path}: {err.strerror or err}", field="capacity"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(
                f"capacity file {self.path}: not JSON: {err}", field="capacity"
            ) from None
        return parse_reading(data, f"capacity file {self.path}")


class HttpCapacitySource:
    """A capacity controller's HTTP endpoint answering the JSON object to GET."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    async def read(self) -> dict[str, int]:
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                resp = await client.get(self.url)
        except httpx.HTTPError as err:
            raise ConfigError(
                f"capacity controller {self.url}: {err!r}", field="capacity"
            ) from None
        if resp.status_code != 200:
            raise ConfigError(
                f"capacity controller {self.url} answered {resp.status_code}", field="capacity"
            )
        try:
            data = resp.json()
        except ValueError:
            raise ConfigError(
                f"capacity controller {self.url}: the answer is not JSON", field="capacity"
            ) from None
        return parse_reading(data, f"capacity controller {self.url}")


def open_capacity_source(spec: str) -> CapacitySource:
    """`file:PATH` or an http(s) URL (`firepool serve --capacity-source`)."""
    if spec.startswith("file:"):
        return FileCapacitySource(Path(spec[len("file:"):]))
    if spec.startswith(("http://", "https://")):
        return HttpCapacitySource(spec)
    raise ConfigError(
        f"capacity source {spec!r}: use file:PATH or an http(s):// URL", field="capacity_source"
    )

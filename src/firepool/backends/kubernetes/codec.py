"""The broker's pod annotations <-> Kubernetes metadata, exactly, both ways.

The broker owns the meaning of its annotations (state, owner, hold, group...); the backend
only stores a `dict[str, str]` so that a restarted broker reads back exactly what it wrote.
Each broker key becomes one Kubernetes annotation `b.<prefix>/<key>`, so `annotate()` is a
merge patch of only the changed keys (no read-modify-write, no resourceVersion conflicts).
A key that is not a valid annotation name (it has a `/`, or other characters) is stored as
`b.<prefix>/x.<base32 of the key>`; one whose encoded name would pass Kubernetes' 63-character
limit is refused with a ConfigError naming it. The backend's own keys live under `<prefix>/`
and never mix with the broker's.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping

from firepool.model import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_ESCAPED = "x."


class AnnotationCodec:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.broker_prefix = f"b.{prefix}/"

    # ------------------------------------------------------------------ backend-owned keys

    def own(self, name: str) -> str:
        """A key the backend itself writes (pool, role, devices...)."""
        return f"{self.prefix}/{name}"

    # ------------------------------------------------------------------ broker keys

    def encode_key(self, key: str) -> str:
        if _NAME.match(key) and not key.startswith(_ESCAPED):
            return self.broker_prefix + key
        packed = base64.b32encode(key.encode()).decode().rstrip("=").lower()
        name = _ESCAPED + packed
        if len(name) > 63 or not key:
            raise ConfigError(
                f"annotation key {key!r} is too long to store on a Kubernetes pod",
                field=f"annotations.{key}",
            )
        return self.broker_prefix + name

    def decode_key(self, name: str) -> str | None:
        """The broker's key for a Kubernetes annotation name, None if it is not one of its."""
        if not name.startswith(self.broker_prefix):
            return None
        short = name[len(self.broker_prefix) :]
        if not short.startswith(_ESCAPED):
            return short
        packed = short[len(_ESCAPED) :].upper()
        packed += "=" * (-len(packed) % 8)
        try:
            return base64.b32decode(packed).decode()
        except (ValueError, UnicodeDecodeError):
            return None

    def encode(self, annotations: Mapping[str, str]) -> dict[str, str]:
        return {self.encode_key(k): v for k, v in annotations.items()}

    def patch(self, changes: Mapping[str, str | None]) -> dict[str, str | None]:
        """A merge-patch body for `metadata.annotations`: None removes the key."""
        return {self.encode_key(k): v for k, v in changes.items()}

    def decode(self, annotations: Mapping[str, str] | None) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in (annotations or {}).items():
            key = self.decode_key(name)
            if key is not None:
                out[key] = value
        return out

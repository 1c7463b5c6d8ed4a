"""firepool: a broker for warm GPU and CPU capacity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from firepool.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client", "__version__"]


def __getattr__(name: str) -> Any:
    """`firepool.Client` / `firepool.AsyncClient` import the SDK on first use, so a plain
    `import firepool` (the agent, the CLI's --help) stays light."""
    if name in ("Client", "AsyncClient"):
        from firepool import client

        return getattr(client, name)
    raise AttributeError(f"module 'firepool' has no attribute {name!r}")

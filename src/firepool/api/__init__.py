"""The REST API (FastAPI): thin routers over services over the store and package store.

Names are loaded on first use, so that importing `firepool.api.schemas` (the SDK does, for the
response models) does not pull in FastAPI and the store.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from firepool.api.app import create_app
    from firepool.api.auth import TokenAuthenticator, issue_token
    from firepool.api.context import LogSource
    from firepool.api.hooks import BrokerHooks, NoHooks

_WHERE = {
    "create_app": "firepool.api.app",
    "TokenAuthenticator": "firepool.api.auth",
    "issue_token": "firepool.api.auth",
    "BrokerHooks": "firepool.api.hooks",
    "NoHooks": "firepool.api.hooks",
    "LogSource": "firepool.api.context",
}

__all__ = [
    "BrokerHooks",
    "LogSource",
    "NoHooks",
    "TokenAuthenticator",
    "create_app",
    "issue_token",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'firepool.api' has no attribute {name!r}")
    return getattr(import_module(module), name)

"""The REST API (FastAPI): thin routers over services over the store and package store."""

from __future__ import annotations

from firepool.api.app import create_app
from firepool.api.auth import TokenAuthenticator, issue_token
from firepool.api.hooks import BrokerHooks, NoHooks
from firepool.api.logs import FileLogSource, LogChunk, LogSource

__all__ = [
    "BrokerHooks",
    "FileLogSource",
    "LogChunk",
    "LogSource",
    "NoHooks",
    "TokenAuthenticator",
    "create_app",
    "issue_token",
]

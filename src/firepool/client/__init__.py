"""The Python SDK: `Client` (blocking) and `AsyncClient` (asyncio), one request layer under
both, typed errors from `firepool.model`.

    import firepool
    job = firepool.Client().run("cpu", ["python", "main.py"], package="./code")
    print(job.state, job.exit_code, job.pods[0].acquisition)
"""

from __future__ import annotations

from firepool.api.schemas import JobOut as Job
from firepool.api.schemas import LogsOut, PackageOut
from firepool.client.aio import AsyncClient
from firepool.client.calls import SubmitOptions
from firepool.client.config import ClientConfig, LocalDefaults, local_defaults, resolve
from firepool.client.errors import ERROR_CLASSES, WaitTimeoutError, status_of
from firepool.client.packaging import Package, load_package, zip_directory
from firepool.client.session import Session
from firepool.client.sync import Client
from firepool.service.routes import PodOut as PodInfo

__all__ = [
    "ERROR_CLASSES",
    "AsyncClient",
    "Client",
    "ClientConfig",
    "Job",
    "LocalDefaults",
    "LogsOut",
    "Package",
    "PackageOut",
    "PodInfo",
    "Session",
    "SubmitOptions",
    "WaitTimeoutError",
    "load_package",
    "local_defaults",
    "resolve",
    "status_of",
    "zip_directory",
]

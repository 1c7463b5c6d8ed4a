"""The Python SDK: `Client` (blocking) and `AsyncClient` (asyncio), one request layer under
both, typed errors from `firepool.model`.

    import firepool
    job = firepool.Client().run("cpu", ["python", "main.py"], package="./code")
    print(job.state, job.exit_code, job.pods[0].acquisition)

Names are imported on first use: `firepool.client.config` (read by `firepool serve`) and the
CLI's `--help` must not pay for the HTTP stack and the API models.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from firepool.api.schemas import JobOut as Job
    from firepool.api.schemas import LogsOut, PackageOut
    from firepool.api.schemas import PodView as PodInfo
    from firepool.client.aio import AsyncClient
    from firepool.client.calls import SubmitOptions
    from firepool.client.config import ClientConfig, LocalDefaults, local_defaults, resolve
    from firepool.client.errors import ERROR_CLASSES, WaitTimeoutError, problems_of, status_of
    from firepool.client.packaging import Package, load_package, zip_directory
    from firepool.client.progress import report_progress
    from firepool.client.session import Session
    from firepool.client.sync import Client

_EXPORTS: dict[str, tuple[str, str]] = {
    "Job": ("firepool.api.schemas", "JobOut"),
    "LogsOut": ("firepool.api.schemas", "LogsOut"),
    "PackageOut": ("firepool.api.schemas", "PackageOut"),
    "PodInfo": ("firepool.api.schemas", "PodView"),
    "AsyncClient": ("firepool.client.aio", "AsyncClient"),
    "Client": ("firepool.client.sync", "Client"),
    "SubmitOptions": ("firepool.client.calls", "SubmitOptions"),
    "ClientConfig": ("firepool.client.config", "ClientConfig"),
    "LocalDefaults": ("firepool.client.config", "LocalDefaults"),
    "local_defaults": ("firepool.client.config", "local_defaults"),
    "resolve": ("firepool.client.config", "resolve"),
    "ERROR_CLASSES": ("firepool.client.errors", "ERROR_CLASSES"),
    "WaitTimeoutError": ("firepool.client.errors", "WaitTimeoutError"),
    "status_of": ("firepool.client.errors", "status_of"),
    "problems_of": ("firepool.client.errors", "problems_of"),
    "Package": ("firepool.client.packaging", "Package"),
    "load_package": ("firepool.client.packaging", "load_package"),
    "zip_directory": ("firepool.client.packaging", "zip_directory"),
    "Session": ("firepool.client.session", "Session"),
    "report_progress": ("firepool.client.progress", "report_progress"),
}

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
    "problems_of",
    "report_progress",
    "resolve",
    "status_of",
    "zip_directory",
]


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'firepool.client' has no attribute {name!r}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value
    return value

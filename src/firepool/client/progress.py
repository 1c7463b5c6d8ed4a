"""`report_progress`: an elastic job tells the broker how far it got, from inside the pod.

The broker sets the attempt, its token and its own URL in the attempt's environment
(`protocol.JobEnv`), so a training loop needs no configuration:

    from firepool.client import report_progress
    report_progress(step=step, samples_per_s=rate, fraction=step / total_steps)

Outside a broker-run attempt (the variables are missing) it does nothing and returns None, so
the same script runs on a laptop. Reports are small and best effort: a broker that cannot be
reached is logged and skipped, never raised into the training loop.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from firepool.api.schemas import ProgressOut
from firepool.model import ErrorCode, FirepoolError, UnavailableError
from firepool.protocol import JobEnv

if TYPE_CHECKING:
    from firepool.client.sync import Client

log = logging.getLogger("firepool.client.progress")

_lock = threading.Lock()
_client: Client | None = None  # one keep-alive Client per process, built on first report


def _shared_client(url: str, token: str) -> Client:
    from firepool.client.sync import Client

    global _client
    with _lock:
        if _client is None:
            _client = Client(url, token, timeout=5.0)
        return _client


def report_progress(
    *,
    step: int | None = None,
    samples_per_s: float | None = None,
    fraction: float | None = None,
) -> ProgressOut | None:
    """Send one progress report for the current attempt; None when not under a broker or
    when the broker could not be reached (a bad value still raises: it is a bug)."""
    env = os.environ
    needed = (JobEnv.URL, JobEnv.JOB_ID, JobEnv.ATTEMPT, JobEnv.PROGRESS_TOKEN)
    if not all(env.get(name) for name in needed):
        return None
    client = _shared_client(env[JobEnv.URL], env[JobEnv.PROGRESS_TOKEN])
    try:
        return client.progress(
            env[JobEnv.JOB_ID],
            env[JobEnv.ATTEMPT],
            step=step,
            samples_per_s=samples_per_s,
            fraction=fraction,
        )
    except UnavailableError as exc:
        log.warning("progress report not delivered: %s", exc)
        return None
    except FirepoolError as exc:
        if exc.code is ErrorCode.VALIDATION:
            raise
        log.warning("progress report refused: %s", exc)
        return None

"""Elastic training jobs in real time: the service's side of the core's elastic rounds.

Every rule (rounds, sizes, stops, starts, verdicts, the failure stream) is the core's
(`control/elastic_jobs.py`). What is left here is what only the service has: the real clock's
round timer settings, each attempt's checkpoint directory on disk, and the per-attempt
progress token, derived from the broker's secret so a job can report progress without holding
its caller's token.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

from firepool.control.core import BrokerCore
from firepool.control.elastic import JobTimes
from firepool.control.elastic_jobs import ElasticRules
from firepool.control.records import Ticket
from firepool.model import NotFoundError
from firepool.protocol import JobEnv


@dataclass(frozen=True)
class ElasticConfig:
    policy: str = "oak"
    round_s: float = 60.0
    tick_s: float = 0.5
    stop_grace_s: float = 30.0  # SIGTERM to SIGKILL when resizing: the checkpoint's time
    failure_rate: float = 0.0  # experiments: failure probability per round per live attempt
    failure_seed: int = 0
    #: Give capacity the policy leaves idle to jobs that want it (see scheduling.backfill).
    work_conserving: bool = True

    def rules(self) -> ElasticRules:
        return ElasticRules(
            policy=self.policy,
            round_s=self.round_s,
            failure_rate=self.failure_rate,
            failure_seed=self.failure_seed,
            work_conserving=self.work_conserving,
        )


class ElasticDriver:
    """Checkpoint directories, progress tokens and the figures experiments read."""

    def __init__(self, core: BrokerCore, *, checkpoint_root: Path, secret: bytes) -> None:
        self.core = core
        self.checkpoint_root = checkpoint_root
        self._secret = secret
        self.decide_ms: collections.deque[float] = collections.deque(maxlen=100_000)

    @property
    def injected(self) -> int:
        """Failures delivered to a launched attempt (experiments)."""
        return self.core.injected

    @property
    def rounds(self) -> int:
        return self.core.elastic.rounds if self.core.elastic is not None else 0

    def times(self, job_id: str, now: float) -> JobTimes:
        if self.core.elastic is None:
            raise NotFoundError(f"job {job_id}: this broker runs no rounds", field="job_id")
        return self.core.elastic.times(job_id, now)

    def progress(
        self,
        job_id: str,
        attempt: str,
        now: float,
        *,
        samples_per_s: float | None,
        fraction: float | None,
    ) -> bool:
        if self.core.elastic is None:
            raise NotFoundError(f"job {job_id} is not an elastic job of this broker",
                                field="job_id")
        return self.core.elastic.progress(
            job_id, attempt, now, samples_per_s=samples_per_s, fraction=fraction
        )

    def progress_token(self, attempt: str) -> str:
        return hmac.new(self._secret, attempt.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, attempt: str, token: str) -> bool:
        return hmac.compare_digest(self.progress_token(attempt), token)

    def environment(self, ticket: Ticket, base_url: str | None) -> dict[str, str]:
        """What the attempt's processes get on top of torchrun's rank variables."""
        directory = self.checkpoint_root / ticket.job
        directory.mkdir(parents=True, exist_ok=True)
        env = {
            JobEnv.JOB_ID: ticket.job,
            JobEnv.ATTEMPT: ticket.attempt,
            JobEnv.PROGRESS_TOKEN: self.progress_token(ticket.attempt),
            JobEnv.CHECKPOINT_DIR: str(directory),
        }
        if base_url is not None:
            env[JobEnv.URL] = base_url
        return env

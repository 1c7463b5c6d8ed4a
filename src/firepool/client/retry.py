"""When the SDK sends a call again: a 503 (the broker's store is down or restarting) on a call
that is safe to repeat.

Safe to repeat: every read, a cancel (cancelling twice changes nothing), a package upload
(content-addressed) and a submission, which always carries an idempotency key (`request_id`,
generated when the caller gave none), so a repeated submission returns the first job instead
of a second one even when the first answer was lost after its commit. A progress report is
not repeated. The pause honours the broker's `Retry-After`, grows exponentially (with jitter)
when it sends none, and is capped; after `budget_s` the 503 is raised as the typed error.
Both clients ask this one class, so they cannot drift apart.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import httpx

#: The statuses worth waiting out: the broker (or a proxy in front of it) is temporarily
#: unable to answer. Anything else is an answer.
RETRY_STATUSES = frozenset({503})
FIRST_PAUSE_S = 0.25
MAX_PAUSE_S = 10.0
DEFAULT_BUDGET_S = 60.0


@dataclass
class Retrying:
    """The retry state of one call: `pause(response, elapsed)` says how long to wait before
    sending it again, or None to give up (hand the response to the caller)."""

    budget_s: float = DEFAULT_BUDGET_S
    cap_s: float = MAX_PAUSE_S
    _next: float = field(default=FIRST_PAUSE_S, repr=False)

    def pause(self, response: httpx.Response, elapsed_s: float) -> float | None:
        if response.status_code not in RETRY_STATUSES:
            return None
        backoff = self._next * (0.5 + random.random() / 2)
        self._next = min(self._next * 2, self.cap_s)
        hinted = retry_after(response)
        pause = min(max(backoff, hinted or 0.0), self.cap_s)
        if elapsed_s + pause > self.budget_s:
            return None
        return pause


def retry_after(response: httpx.Response) -> float | None:
    """The `Retry-After` header in seconds (the delay form; an HTTP date is ignored)."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None

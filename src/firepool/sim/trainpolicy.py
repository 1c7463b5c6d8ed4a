"""How the training simulator hands a round to a policy: ablation masks, Gavel's remaining
work, decision timing, and a memo for policies whose decision depends on goodputs alone.

The lifecycle (`control/elastic.py`) builds the round exactly as it does in the service; this
wrapper only changes what the experiment asks it to change:

* `mask_progress` hides `T_progress` (r = 1 for every job: ablation cell b);
* `remaining_work` fills in each job's remaining seconds of work on one reference GPU, which
  only Gavel reads (the service cannot know it, the simulator can);
* `memo_goodput_only` reuses the previous decision when every job and its goodputs are the same
  as last round. Only for a policy whose decision is a function of (capacity, jobs in order,
  configurations, goodputs): Sia without its restart factor and pinning (its utility is then
  `G^p`, solved by the same MILP), where most rounds of a long run repeat the last one. The
  result is the very object the policy returned for that input, so runs are identical with and
  without it (a test holds this).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from firepool.scheduling import RoundInput, RoundPolicy, RoundResult

RemainingWork = Callable[[str], float]
_Key = tuple[tuple[str, tuple[float, ...]], ...]


@dataclass(slots=True)
class PolicyView:
    """A `RoundPolicy` around the experiment's policy; counts rounds and real decisions."""

    policy: RoundPolicy
    mask_progress: bool = False
    remaining_work: RemainingWork | None = None
    memo_goodput_only: bool = False
    rounds: int = 0
    decisions: int = 0
    decide_s: float = 0.0
    _key: _Key | None = None
    _last: RoundResult | None = None

    @property
    def name(self) -> str:
        return self.policy.name

    def decide(self, round_input: RoundInput) -> RoundResult:
        self.rounds += 1
        key: _Key | None = None
        if self.memo_goodput_only:
            key = tuple((j.job_id, j.goodputs) for j in round_input.jobs)
            if key == self._key and self._last is not None:
                return self._last
        if self.mask_progress or self.remaining_work is not None:
            round_input = self._view(round_input)
        t0 = time.perf_counter()
        result = self.policy.decide(round_input)
        self.decide_s += time.perf_counter() - t0
        self.decisions += 1
        self._key, self._last = key, result
        return result

    def _view(self, ri: RoundInput) -> RoundInput:
        work = self.remaining_work
        masked = self.mask_progress
        jobs = tuple(
            replace(
                j,
                t_progress=0.0 if masked else j.t_progress,
                remaining_work=work(j.job_id) if work is not None else j.remaining_work,
            )
            for j in ri.jobs
        )
        return RoundInput(ri.capacity, jobs, ri.round_s)

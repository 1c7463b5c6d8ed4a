"""DRF baseline: progressive filling on each job's dominant share, no goodput model.

Each step the job with the smallest dominant share (its GPUs over the capacity of their type)
grows to its next larger configuration if that fits; a job that cannot grow is frozen. It stops
when every job is frozen; a last pass gives capacity a job freed by moving to another GPU type
to the jobs still idle. Deterministic; ties go to the earlier job.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from firepool.scheduling.prepare import prepare
from firepool.scheduling.rounds import RoundInput, RoundResult


@dataclass(frozen=True, slots=True)
class DrfPolicy:
    name: str = "drf"

    def decide(self, round_input: RoundInput) -> RoundResult:
        prep = prepare(round_input)
        cap = np.maximum(prep.capacity, 1.0)
        share = prep.opt_replicas / cap[prep.opt_type]
        ladders: list[list[int]] = [[] for _ in range(prep.n_jobs)]
        for k in np.lexsort((prep.opt_replicas, share)).tolist():
            ladders[int(prep.opt_job[k])].append(k)
        free = prep.capacity.copy()
        choice = np.full(prep.n_jobs, -1, dtype=np.int64)
        step = [0] * prep.n_jobs
        heap = [(0.0, i) for i in range(prep.n_jobs) if ladders[i]]
        heapq.heapify(heap)
        while heap:
            _, i = heapq.heappop(heap)
            held = int(choice[i])
            if held >= 0:
                free[prep.opt_type[held]] += prep.opt_replicas[held]
            grown = False
            while step[i] < len(ladders[i]):
                k = ladders[i][step[i]]
                step[i] += 1
                if prep.opt_replicas[k] <= free[prep.opt_type[k]] and (
                    held < 0 or share[k] > share[held]
                ):
                    choice[i] = k
                    free[prep.opt_type[k]] -= prep.opt_replicas[k]
                    heapq.heappush(heap, (float(share[k]), i))
                    grown = True
                    break
            if not grown and held >= 0:
                free[prep.opt_type[held]] -= prep.opt_replicas[held]
        # A job that grew onto another GPU type freed capacity of its old type, which a job
        # frozen earlier may fit in: give it that capacity (progressive filling ends only when
        # no idle job fits anything that is free).
        for i in range(prep.n_jobs):
            if choice[i] >= 0:
                continue
            for k in ladders[i]:
                if prep.opt_replicas[k] <= free[prep.opt_type[k]]:
                    choice[i] = k
                    free[prep.opt_type[k]] -= prep.opt_replicas[k]
                    break
        filled = int(np.count_nonzero(choice >= 0))
        return prep.result(self.name, choice, float(filled), "progressive-filling")

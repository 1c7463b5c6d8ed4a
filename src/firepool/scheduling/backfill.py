"""Work-conserving backfill over any round policy's answer.

OAK and Sia leave a job unallocated whenever its utility is below the no-allocation term
`mu_na`, even when nobody else wants the GPUs it would use: a lone job whose restart factor
has dropped is preempted onto an idle cluster. A broker should not idle capacity that a job
is asking for, so after the policy has decided, what it left free is handed out:

1. a running job the policy left without an allocation keeps its current configuration if it
   still fits (no restart, no new overhead);
2. then waiting jobs, longest queued first, get their highest-goodput configuration that fits.

Contended capacity is untouched: the policy's choices stand wherever they use the GPUs, so
the policy still decides who runs when jobs compete. Pure, like the policies.
"""

from __future__ import annotations

from firepool.scheduling.rounds import Configuration, RoundInput, RoundResult


def backfill(round_input: RoundInput, result: RoundResult) -> RoundResult:
    free = dict(round_input.capacity)
    for gpu, used in result.used().items():
        free[gpu] = free.get(gpu, 0) - used
    assignments: dict[str, Configuration | None] = dict(result.assignments)
    idle = [j for j in round_input.jobs
            if assignments.get(j.job_id) is None and j.job_id not in result.infeasible]
    changed = False
    for job in idle:
        current = job.current
        if current is not None and current.replicas <= free.get(current.gpu_type, 0):
            assignments[job.job_id] = current
            free[current.gpu_type] -= current.replicas
            changed = True
    waiting = [j for j in idle if assignments.get(j.job_id) is None and j.current is None]
    for job in sorted(waiting, key=lambda j: (-j.t_queue, j.job_id)):
        fitting = [
            (goodput, -cfg.replicas, k)
            for k, (cfg, goodput) in enumerate(zip(job.configurations, job.goodputs, strict=True))
            if cfg.replicas <= free.get(cfg.gpu_type, 0)
        ]
        if not fitting:
            continue
        cfg = job.configurations[max(fitting)[2]]
        assignments[job.job_id] = cfg
        free[cfg.gpu_type] -= cfg.replicas
        changed = True
    if not changed:
        return result
    return RoundResult(
        result.policy,
        assignments,
        dict(result.infeasible),
        result.objective,
        f"{result.solver}+backfill" if result.solver else "backfill",
    )

"""Whether a job's pods can talk to each other, checked when a job is submitted.

A gang's ranks rendezvous and all-reduce over TCP between their pods (torchrun's MASTER_ADDR is
rank 0's pod), and so do an elastic job's once a round gives it more than one pod. A pool whose
network is `none` or `egress` gives every pod a network of its own (a local pod's namespace, a
cluster pod under the isolating NetworkPolicy), so such a gang would queue, start, and then hang
at its rendezvous until its timeout. It is refused at submission instead, naming the pool and
what would admit it. The simulator models no network and does not apply it.
"""

from __future__ import annotations

from firepool.model import JobKind, JobSpec, NetworkAccess, PoolSpec, RequestValidationError


def check_gang_network(pool: PoolSpec, spec: JobSpec) -> None:
    """Raise when `spec` is a gang of several pods that `pool`'s network keeps apart: a fixed
    gang (`pods`), or an elastic job the rounds may grow past one pod (`elastic.max_pods`)."""
    if pool.network is NetworkAccess.HOST:
        return
    elastic = spec.elastic.max_pods if spec.kind is JobKind.ELASTIC and spec.elastic else 1
    if spec.pods > 1 or elastic > 1:
        field, count = ("pods", spec.pods) if spec.pods > 1 else ("elastic.max_pods", elastic)
        raise RequestValidationError(
            f"{field}: a gang of up to {count} pods needs its pods to reach each other, and "
            f"pool {pool.name} keeps each pod's network to itself (network "
            f"{pool.network.value}); run it on a pool with network = host",
            field=field,
        )

"""Template rollout: what an edit of a pool's catalog entry means for its running pods.

A pod is built from its pool's template (image, shape, preloaded modules). When an operator
changes the template, pods of the old version must not take new jobs, yet the pool must keep
serving: idle pods of the old template drain first, busy ones after their job, never more
than the scaler's `drain_budget` retiring at once, and replacements are created only inside
the pool's ceiling and the budget (old pods count as capacity until they are gone). Those
rules live in the tracker (`set_pool`, `release`) and the scaler (`_drain_stale`); this module
decides which edits start a rollout and reports how far one has come. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from firepool.control.records import Pod
from firepool.model import ConfigError, PodState, PoolSpec

#: The fields a pod is built from: changing any of them needs new pods.
TEMPLATE_FIELDS = ("cpus_per_pod", "memory_mib_per_pod", "image", "preload_modules", "network")
#: Fields that name the budget a pool draws from and how pods group on a card: a live pool
#: cannot change them under its pods (define a new pool instead).
FIXED_FIELDS = ("accelerator", "accelerators_per_pod")


def applied_spec(current: PoolSpec, wanted: PoolSpec) -> PoolSpec:
    """The spec the broker runs after an operator asked for `wanted`.

    A changed template field starts a rollout even if the operator forgot to raise
    `template_version` (the version then becomes the current one + 1); a higher version with
    an unchanged template restarts every pod on purpose; scaling knobs alone change no pod.
    A lower version than the running one is never a rollback to old pods: it is refused.
    """
    if wanted.name != current.name:
        raise ConfigError(
            f"pool {current.name}: the spec names pool {wanted.name!r}", field="name"
        )
    for name in FIXED_FIELDS:
        if getattr(wanted, name) != getattr(current, name):
            raise ConfigError(
                f"pool {current.name}: {name} cannot change on a live pool "
                f"({getattr(current, name)!r} -> {getattr(wanted, name)!r}); define a new pool",
                field=name,
            )
    if wanted.template_version < current.template_version:
        raise ConfigError(
            f"pool {current.name}: template_version {wanted.template_version} is older than "
            f"the running {current.template_version}",
            field="template_version",
        )
    changed = any(getattr(wanted, name) != getattr(current, name) for name in TEMPLATE_FIELDS)
    version = wanted.template_version
    if changed and version == current.template_version:
        version = current.template_version + 1
    if version == wanted.template_version:
        return wanted
    return wanted.model_copy(update={"template_version": version})


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    """How far a pool's pods are on its current template.

    `stale_idle` pods of the old template wait to drain, `stale_busy` ones finish their job
    first, `retiring` ones are being deleted (they hold capacity until they are gone).
    """

    pool: str
    template_version: int
    pods: int = 0
    current: int = 0
    stale_idle: int = 0
    stale_busy: int = 0
    retiring: int = 0
    #: The spec came from an admin's applied edit (this run or a stored one), not the catalog.
    edited: bool = False

    @property
    def old(self) -> int:
        """Pods of an older template still alive (retiring ones included)."""
        return self.pods - self.current

    @property
    def done(self) -> bool:
        return self.old == 0


_BUSY = (PodState.ASSIGNED, PodState.RUNNING)


def rollout_progress(spec: PoolSpec, pods: Iterable[Pod]) -> RolloutProgress:
    """Count the pool's pods by template and drain state."""
    total = current = stale_idle = stale_busy = retiring = 0
    version = spec.template_version
    for pod in pods:
        total += 1
        state = pod.state
        if pod.template == version:
            current += 1
        elif state is PodState.RETIRING:
            retiring += 1
        elif state in _BUSY:
            stale_busy += 1
        else:
            stale_idle += 1
    return RolloutProgress(spec.name, version, total, current, stale_idle, stale_busy, retiring)

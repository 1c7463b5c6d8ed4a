"""Which stored pool edits a starting broker runs: an admin's applied edit outlives the process.

A broker starts from its catalog file; edits applied since (`PUT /v1/pools/{name}`) are in
the store. Each stored edit is laid over the catalog's entry for its pool unless the catalog
has moved past it: a higher catalog `template_version` means the operator changed the file
after the edit, and the file wins. An edit for a pool the catalog no longer has, or one that
no longer fits it (a fixed field changed), is reported and skipped: a stale edit must never
keep the broker from starting. An edit at the catalog's own version whose template differs
from the catalog's (the file was changed without raising the version) is applied the way
`applied_spec` applies any such edit: one version up. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from firepool.control.rollout import applied_spec
from firepool.model import ConfigError, PoolSpec


@dataclass(frozen=True, slots=True)
class StoredEdits:
    #: The specs to apply on top of the catalog, in the order given.
    apply: tuple[PoolSpec, ...]
    #: One line per stored edit left out, saying why (for the broker's log).
    skipped: tuple[str, ...]


def stored_edits_to_apply(
    catalog: Mapping[str, PoolSpec], stored: Iterable[PoolSpec]
) -> StoredEdits:
    apply: list[PoolSpec] = []
    skipped: list[str] = []
    for edit in stored:
        current = catalog.get(edit.name)
        if current is None:
            skipped.append(
                f"pool {edit.name!r} has an applied edit in the store but is not in the "
                f"catalog any more: the edit is ignored"
            )
            continue
        if edit.template_version < current.template_version:
            skipped.append(
                f"pool {edit.name!r}: the catalog's template_version "
                f"{current.template_version} is newer than the applied edit's "
                f"{edit.template_version}: the catalog wins"
            )
            continue
        try:
            apply.append(applied_spec(current, edit))
        except ConfigError as err:
            skipped.append(f"pool {edit.name!r}: the applied edit is ignored: {err}")
    return StoredEdits(tuple(apply), tuple(skipped))

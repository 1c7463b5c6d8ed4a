"""Applied pool edits in SQL: an admin's `PUT /v1/pools/{name}` outlives the broker process.

A mixin of `SqlJobStore` like `AccountsMixin`. One row per pool, replaced by each edit (the
latest applied spec is the whole truth; a rollout needs no history).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from firepool.model import PoolSpec
from firepool.store.committer import Committer, Tx
from firepool.store.records import PoolEdit
from firepool.store.schema import pool_edits


class PoolEditsMixin:
    _committer: Committer

    if TYPE_CHECKING:  # provided by the store class this mixes into

        def _read(self, fn: Any) -> Any: ...

    def save_pool_edit(self, spec: PoolSpec, *, now: float) -> PoolEdit:
        row = {
            "name": spec.name,
            "spec": spec.model_dump_json(),
            "template_version": spec.template_version,
            "applied_at": now,
        }

        def write(tx: Tx) -> None:
            # Delete then insert: one portable upsert on SQLite, PostgreSQL and MariaDB.
            tx.conn.execute(sa.delete(pool_edits).where(pool_edits.c.name == spec.name))
            tx.conn.execute(pool_edits.insert().values(row))

        self._committer.run(write)
        return PoolEdit(spec, now)

    def pool_edits(self) -> list[PoolEdit]:
        query = sa.select(pool_edits).order_by(pool_edits.c.name)
        rows = self._read(lambda conn: conn.execute(query).all())
        return [PoolEdit(PoolSpec.model_validate_json(r.spec), r.applied_at) for r in rows]

"""Packages and callers in SQL: the store's bookkeeping beside the job lifecycle.

A mixin of `SqlJobStore`, kept apart so that the lifecycle code reads on its own; it uses
the store's committer for writes and pooled connections for reads, like everything else.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from firepool.model import Principal, TokenRole
from firepool.store.committer import Committer, Tx
from firepool.store.records import PackageRecord
from firepool.store.schema import callers, packages, tokens


class AccountsMixin:
    _committer: Committer

    def _read(self, fn: Any) -> Any:
        raise NotImplementedError

    def add_package(self, digest: str, size: int, *, caller: str, now: float) -> PackageRecord:
        def write(tx: Tx) -> PackageRecord:
            conn = tx.conn
            row = conn.execute(sa.select(packages).where(packages.c.digest == digest)).first()
            if row is None:
                conn.execute(
                    packages.insert().values(
                        digest=digest, size=size, created_at=now, uploaded_by=caller
                    )
                )
                return PackageRecord(digest, size, now, caller)
            return PackageRecord(row.digest, row.size, row.created_at, row.uploaded_by)

        record: PackageRecord = self._committer.run(write)
        return record

    def get_package(self, digest: str) -> PackageRecord | None:
        def read(conn: sa.Connection) -> PackageRecord | None:
            row = conn.execute(sa.select(packages).where(packages.c.digest == digest)).first()
            if row is None:
                return None
            return PackageRecord(row.digest, row.size, row.created_at, row.uploaded_by)

        found: PackageRecord | None = self._read(read)
        return found

    # ------------------------------------------------------------------ callers
    def add_token(
        self, caller: str, token_hash: str, *, now: float, role: TokenRole = TokenRole.CALLER
    ) -> None:
        def write(tx: Tx) -> None:
            conn = tx.conn
            known = conn.execute(sa.select(callers.c.name).where(callers.c.name == caller)).first()
            if known is None:
                conn.execute(callers.insert().values(name=caller, created_at=now))
            conn.execute(
                tokens.insert().values(
                    token_hash=token_hash,
                    caller=caller,
                    created_at=now,
                    revoked=False,
                    role=TokenRole(role).value,
                )
            )

        self._committer.run(write)

    def caller_for_token(self, token_hash: str) -> str | None:
        query = sa.select(tokens.c.caller).where(
            tokens.c.token_hash == token_hash, tokens.c.revoked == sa.false()
        )
        found: str | None = self._read(lambda conn: conn.execute(query).scalar())
        return found

    def principal_for_token(self, token_hash: str) -> Principal | None:
        query = sa.select(tokens.c.caller, tokens.c.role).where(
            tokens.c.token_hash == token_hash, tokens.c.revoked == sa.false()
        )
        row = self._read(lambda conn: conn.execute(query).first())
        return None if row is None else Principal(row.caller, TokenRole(row.role))

    def revoke_token(self, token_hash: str) -> None:
        def write(tx: Tx) -> None:
            conn = tx.conn
            conn.execute(
                sa.update(tokens).where(tokens.c.token_hash == token_hash).values(revoked=True)
            )

        self._committer.run(write)

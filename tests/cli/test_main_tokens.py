"""`firepool token create --role`: the minted token carries the role; a bad role is refused."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from firepool.cli.main import app
from firepool.model import Principal, TokenRole
from firepool.store import open_store
from firepool.store.tokens import hash_token


def test_token_create_takes_a_role(tmp_path: Path) -> None:
    runner = CliRunner()
    made = {}
    where = ["--data-dir", str(tmp_path)]
    for caller, extra in (("alice", []), ("root", ["--role", "admin"])):
        result = runner.invoke(app, ["token", "create", caller, *where, *extra])
        assert result.exit_code == 0, result.output
        made[caller] = result.stdout.strip()
    store = open_store(data_dir=tmp_path)
    try:
        assert store.principal_for_token(hash_token(made["alice"])) == Principal("alice")
        root = Principal("root", TokenRole.ADMIN)
        assert store.principal_for_token(hash_token(made["root"])) == root
    finally:
        store.close()
    refused = runner.invoke(
        app, ["token", "create", "eve", "--data-dir", str(tmp_path), "--role", "owner"]
    )
    assert refused.exit_code == 2 and "owner" in refused.output

"""`firepool pools apply catalog.toml` against a whole broker: an admin rolls a pool to a new
template and `firepool pools` shows the rollout; a caller is refused; a file naming a pool
the broker lacks changes nothing."""

from __future__ import annotations

import tomllib
from pathlib import Path

from cli_harness import invoker

from firepool.model import TokenRole
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog, parse_catalog
from firepool.testing.service import running_broker
from firepool.testing.waiting import wait_until

CATALOG = """
[[pools]]
name = "cpu"
min_count = 1
max_idle_count = 1
max_count = 2
memory_mib_per_pod = 512
step = 2
template_version = {version}
"""


def test_pools_apply_rolls_a_pool_and_pools_shows_it(tmp_path: Path) -> None:
    start = parse_catalog(tomllib.loads(CATALOG.format(version=1)))
    with running_broker(tmp_path / "b", catalog=Catalog(start.pools, {"cpu": 2}),
                        config=BrokerConfig(reconcile_s=2.0)) as broker:
        admin = invoker(broker.url, broker.issue("root", TokenRole.ADMIN))
        caller = invoker(broker.url, broker.token)
        wait_until("the floor is ready", lambda: "v1 done" in caller("pools").stdout,
                   timeout=120.0)
        edited = tmp_path / "catalog.toml"
        edited.write_text(CATALOG.format(version=2))
        refused = caller("pools", "apply", str(edited))
        assert refused.exit_code == 1 and "Forbidden" in refused.stderr
        listed = caller("pools").stdout
        assert "v1 done" in listed and "catalog" in listed and "applied edit" not in listed
        applied = admin("pools", "apply", str(edited))
        assert applied.exit_code == 0, applied.stderr
        assert "v2" in applied.stdout and "applied edit" in applied.stdout
        assert "applied edit" in caller("pools").stdout  # SPEC: where the spec came from
        wait_until("rolled over", lambda: "v2 done" in caller("pools").stdout, timeout=120.0)
        unknown = tmp_path / "unknown.toml"
        unknown.write_text(CATALOG.format(version=3) + CATALOG.format(version=1).replace(
            '"cpu"', '"gpu"'))
        missing = admin("pools", "apply", str(unknown))
        assert missing.exit_code == 1 and "UnknownPool" in missing.stderr
        assert "v2 done" in caller("pools").stdout  # the cpu pool was not touched either

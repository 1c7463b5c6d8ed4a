"""A small fault campaign in `make test` (issue 13, item 6): real `firepool serve` processes,
real pods, real databases. Two broker SIGKILLs under load, one agent partition and one agent
kill on SQLite; one store restart on a private PostgreSQL server (stopped and started).
Nothing may be lost, incomplete or run twice (counted from the jobs' own calls home), and
every owner hold survives the kills."""

from __future__ import annotations

from pathlib import Path

import pytest

from firepool.experiment.faults import FaultCampaign, main
from firepool.testing.host import needs
from firepool.testing.private_db import PG_BIN

pytestmark = pytest.mark.timeout(600)

SMALL = FaultCampaign(
    kills=2,
    store_restarts=0,
    partitions=1,
    agent_kills=1,
    jobs=12,
    store="sqlite",
    stream_interval_s=0.5,
    loop_scale=0.3,
    gap_s=(1.0, 3.0),
    baseline_s=3.0,
    drain_s=120.0,
)


def test_a_small_campaign_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    out = main(SMALL, tmp_path / "out", tmp_path / "faults.json")
    assert (out["broker_faults"], out["partition_faults"], out["agent_faults"]) == (2, 1, 1)
    assert out["jobs"] > SMALL.jobs  # the stream, the loops' jobs and the victims
    assert (out["lost"], out["run_twice"], out["output_incomplete"]) == (0, 0, 0), out
    assert out["partition_retried"] >= 1 and out["agent_retried"] >= 1, out  # victims moved on
    assert out["restart_to_dispatch_ms_p50"] is not None  # each restart reached dispatching
    if out["holds_before"]:
        notes = {k: v for k, v in out.items() if k.endswith("_notes") and v}
        assert out["holds_restored_pct"] == 100.0, notes
    assert (tmp_path / "faults.json").exists() and (tmp_path / "out" / "faults.md").exists()


def test_a_postgresql_restart_under_load_loses_nothing(tmp_path: Path) -> None:
    """The store kind on a private PostgreSQL server, stopped and started under load. Needs
    the broker to ride out an unavailable store (503 StoreUnavailable, exits kept in memory)."""
    if not (PG_BIN / "initdb").exists():
        needs("PostgreSQL's initdb and pg_ctl (the campaign starts a private server)")
    small = FaultCampaign(
        kills=0, store_restarts=1, partitions=0, agent_kills=0, jobs=12, store="postgresql",
        stream_interval_s=0.5, loop_scale=0.3, gap_s=(1.0, 3.0), baseline_s=3.0,
        outage_s=2.0, drain_s=30.0,
    )  # fmt: skip
    out = main(small, tmp_path / "out", tmp_path / "faults.json")
    assert out["store_faults"] == 1 and out["store_jobs"] > 0
    assert (out["lost"], out["run_twice"], out["output_incomplete"]) == (0, 0, 0), out

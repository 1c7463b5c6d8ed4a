"""`bench peers` runs end to end at tiny scale: every system it ran has its keys in the JSON,
the hostile-job probe finds the leak where one exists (a fresh subprocess shares /tmp and the
process table with the next caller's job) and none on firepool. No figure is compared with a
target (the machine is shared)."""

from __future__ import annotations

import json
from pathlib import Path

from firepool.bench import peers


def test_peers_reports_overheads_and_the_probes_leaks(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    argv = ["--short-jobs", "4", "--fresh-short-jobs", "2", "--loops", "none"]
    argv += ["--systems", "firepool_reuse,firepool_fresh,subprocess", "--json", str(out)]
    assert peers.main(argv) == 0
    r = json.loads(out.read_text())
    for system in ("firepool_reuse", "firepool_fresh", "subprocess"):
        assert r[f"{system}_failed"] == 0
        assert r[f"{system}_overhead_ms"] > 0 and f"{system}_stream_loadavg_1m" in r
        assert 0 < r[f"{system}_start_ms_p50"] <= r[f"{system}_start_ms_p90"]
    assert r["firepool_reuse_short_stream_jobs"] == 4
    assert r["firepool_fresh_short_stream_jobs"] == 2
    # The subprocess's leftovers are there for the next caller; firepool's are not, whether
    # the next job is another caller's (another pod) or the same caller's (the pod, reset).
    assert r["subprocess_leaks"] == 2 and r["subprocess_leak_file"] and r["subprocess_leak_daemon"]
    assert r["subprocess_leaks_same_caller"] == 2
    assert r["subprocess_daemon_alive_on_host"] is True
    for system in ("firepool_reuse", "firepool_fresh"):
        assert r[f"{system}_leaks"] == 0 and r[f"{system}_leaks_same_caller"] == 0
        # Not merely out of the next job's sight: gone from the host.
        assert r[f"{system}_daemon_alive_on_host"] is False
    # With reuse on, the same caller's next job ran on the pod the planting job had used.
    assert r["firepool_reuse_probe_same_caller_same_worker"] is True
    assert r["firepool_fresh_probe_same_caller_same_worker"] is False
    assert r["short_stream_speedup_vs_fresh_pod"] > 0

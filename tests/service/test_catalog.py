"""The catalog file: scaler knobs and the cross-pool per-caller GPU limit are settable there,
reach the broker core, and every bad value is a typed error naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from firepool.control.scaler import ScalerConfig
from firepool.model import ConfigError
from firepool.service.catalog import load_catalog, parse_catalog
from firepool.testing.service import running_broker

POOLS = [{"name": "gpu", "accelerator": "fake", "accelerators_per_pod": 1, "max_count": 2}]


def test_scaler_and_limits_come_from_the_catalog(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(
        '[[pools]]\nname = "gpu"\naccelerator = "fake"\naccelerators_per_pod = 1\n'
        "[scaler]\nhold_break_min_tenure = 5\ndrain_budget = 3\n"
        "[limits]\nmax_gpus_per_caller = 1\n"
    )
    catalog = load_catalog(path)
    assert catalog.scaler == ScalerConfig(hold_break_min_tenure=5.0, drain_budget=3)
    assert catalog.max_gpus_per_caller == 1
    defaults = parse_catalog({"pools": POOLS})
    assert defaults.scaler == ScalerConfig() and defaults.max_gpus_per_caller is None


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"scaler": {"drain_budget": 0}}, "scaler.drain_budget"),
        ({"scaler": {"drain_budget": True}}, "scaler.drain_budget"),
        ({"scaler": {"hold_break_min_tenure": -1}}, "scaler.hold_break_min_tenure"),
        ({"scaler": {"hold_break_min_tenure": "soon"}}, "scaler.hold_break_min_tenure"),
        ({"scaler": {"drain": 2}}, "scaler.drain"),
        ({"scaler": 3}, "scaler"),
        ({"limits": {"max_gpus_per_caller": -2}}, "limits.max_gpus_per_caller"),
        ({"limits": {"max_gpu_per_caller": 2}}, "limits.max_gpu_per_caller"),
        ({"limit": {}}, "limit"),
    ],
)
def test_bad_knobs_are_typed_errors_naming_the_key(extra: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_catalog({"pools": POOLS, **extra})
    assert err.value.field == field


def test_the_core_gets_the_catalogs_knobs(tmp_path: Path) -> None:
    catalog = parse_catalog({
        "pools": POOLS, "scaler": {"drain_budget": 2}, "limits": {"max_gpus_per_caller": 1},
    })
    with running_broker(tmp_path, catalog=catalog, fake_devices=["GPU-0"]) as broker:
        core = broker.embedded.broker.core
        assert core.config.scaler.drain_budget == 2
        assert core.tracker.max_gpus_per_caller == 1

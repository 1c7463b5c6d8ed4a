"""The pool catalog: which pools exist and the global budgets, from a file or this machine.

A catalog file (TOML or YAML) has `[[pools]]` entries with PoolSpec fields, an optional
`[budgets]` table (accelerator model or `cpu` -> units), an optional `[scaler]` table
(`hold_break_min_tenure`, `drain_budget`), an optional `[limits]` table
(`max_gpus_per_caller`, across every pool) and an optional `[local_images]` table (image
reference or repository -> the absolute path of an environment directory with `bin/python`,
which is what a custom image is on the local backend). Unknown keys are refused with a
ConfigError naming them: a typo in a knob must not silently fall back to a default.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from firepool.control.scaler import ScalerConfig
from firepool.model import ACCELERATORS, ConfigError, PoolSpec, image_reference_problem


@dataclass(frozen=True)
class Catalog:
    pools: tuple[PoolSpec, ...]
    budgets: dict[str, int] = field(default_factory=dict)
    scaler: ScalerConfig = field(default_factory=ScalerConfig)
    #: GPUs one caller may hold across every pool (None: no limit beyond each pool's).
    max_gpus_per_caller: int | None = None
    #: What each custom image is on the local backend: reference or repository -> directory.
    local_images: dict[str, str] = field(default_factory=dict)

    def pool(self, name: str) -> PoolSpec | None:
        for spec in self.pools:
            if spec.name == name:
                return spec
        return None


def parse_catalog(data: Any, source: str = "catalog") -> Catalog:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a table with `pools`", field="pools")
    unknown = set(data) - {"pools", "budgets", "scaler", "limits", "local_images"}
    if unknown:
        name = sorted(unknown)[0]
        raise ConfigError(f"{source}: unknown key {name!r}", field=name)
    entries = data.get("pools")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{source}: `pools` must be a non-empty list", field="pools")
    pools: list[PoolSpec] = []
    for i, entry in enumerate(entries):
        try:
            spec = PoolSpec.model_validate(entry)
        except ConfigError as err:
            raise ConfigError(
                f"{source}: pools[{i}]: {err.message}", field=f"pools.{i}.{err.field}"
            ) from None
        if any(p.name == spec.name for p in pools):
            raise ConfigError(
                f"{source}: pool {spec.name!r} defined twice", field=f"pools.{i}.name"
            )
        pools.append(spec)
    budgets = data.get("budgets") or {}
    if not isinstance(budgets, dict):
        raise ConfigError(f"{source}: `budgets` must be a table", field="budgets")
    for key, value in budgets.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(
                f"{source}: budget {key!r} must be an integer >= 0", field=f"budgets.{key}"
            )
    scaler = _scaler(data.get("scaler"), source)
    limits = _table(data.get("limits"), source, "limits", {"max_gpus_per_caller"})
    gpus = limits.get("max_gpus_per_caller")
    if gpus is not None and not _count(gpus):
        raise ConfigError(
            f"{source}: max_gpus_per_caller must be an integer >= 0",
            field="limits.max_gpus_per_caller",
        )
    return Catalog(tuple(pools), dict(budgets), scaler, gpus, _local_images(data, source))


def _local_images(data: dict[str, Any], source: str) -> dict[str, str]:
    table = data.get("local_images") or {}
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: `local_images` must be a table", field="local_images")
    for image, where in table.items():
        problem = image_reference_problem(image)
        if problem is not None:
            raise ConfigError(f"{source}: local_images: {problem}", field=f"local_images.{image}")
        if not isinstance(where, str) or not os.path.isabs(where):
            raise ConfigError(
                f"{source}: local_images.{image} must be an absolute directory path",
                field=f"local_images.{image}",
            )
    return dict(table)


def _table(value: Any, source: str, name: str, known: set[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: `{name}` must be a table", field=name)
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r} in `{name}`",
                          field=f"{name}.{unknown[0]}")
    return value


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _scaler(value: Any, source: str) -> ScalerConfig:
    table = _table(value, source, "scaler", {"hold_break_min_tenure", "drain_budget"})
    default = ScalerConfig()
    tenure = table.get("hold_break_min_tenure", default.hold_break_min_tenure)
    if isinstance(tenure, bool) or not isinstance(tenure, int | float) or not 0 <= tenure < 1e9:
        raise ConfigError(f"{source}: hold_break_min_tenure must be seconds >= 0",
                          field="scaler.hold_break_min_tenure")
    drain = table.get("drain_budget", default.drain_budget)
    if not _count(drain) or drain < 1:
        raise ConfigError(f"{source}: drain_budget must be an integer >= 1",
                          field="scaler.drain_budget")
    return ScalerConfig(hold_break_min_tenure=float(tenure), drain_budget=drain)


def load_catalog(path: Path) -> Catalog:
    text = path.read_text()
    try:
        yaml_file = path.suffix in (".yaml", ".yml")
        data = yaml.safe_load(text) if yaml_file else tomllib.loads(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(
            f"{path}: not valid {path.suffix[1:] or 'TOML'}: {err}", field="catalog"
        ) from None
    return parse_catalog(data, str(path))


def machine_catalog(gpu_models: dict[str, int] | None = None) -> Catalog:
    """The embedded default: a `cpu` pool sized from this machine and one pool per local GPU
    model. Local pods are light processes that time-share the cores, so the CPU pool may hold
    a few pods per core; the GPU pools hold one pod per device."""
    cores = os.cpu_count() or 1
    pools = [
        PoolSpec(
            name="cpu",
            cpus_per_pod=1,
            min_count=1,
            max_idle_count=2,
            max_count=max(4, 4 * cores),
            idle_timeout=120.0,
            step=4,
        )
    ]
    budgets: dict[str, int] = {}
    for model, count in sorted((gpu_models or {}).items()):
        if model not in ACCELERATORS:
            continue  # a device we cannot name gets no pool (and no silent guess)
        pools.append(
            PoolSpec(
                name=model.lower().replace("_", "-"),
                accelerator=model,
                accelerators_per_pod=1,
                max_count=count,
                standbys_per_active=1,
                idle_timeout=120.0,
            )
        )
        budgets[model] = count
    return Catalog(tuple(pools), budgets)

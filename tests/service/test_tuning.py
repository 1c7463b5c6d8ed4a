"""The serving process's tuning: its event loop is uvloop's where uvloop is installed (it is a
dependency wherever it builds), and plain asyncio's where it is not, with the same result."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import sys

import pytest

from firepool.service.tuning import GEN0_THRESHOLD, run_serving, tune_gc_for_serving


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_a_serving_process_runs_on_uvloop() -> None:
    assert importlib.util.find_spec("uvloop") is not None, "uvloop is a dependency here"
    assert run_serving(_loop_module()).startswith("uvloop")


def test_without_uvloop_it_runs_on_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert run_serving(_loop_module()).startswith("asyncio")


def test_its_collector_leaves_start_up_objects_alone() -> None:
    before = gc.get_threshold()
    try:
        tune_gc_for_serving()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == GEN0_THRESHOLD
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)

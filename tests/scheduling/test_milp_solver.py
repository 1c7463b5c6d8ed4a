"""The MILP interface: GLPK by default, HiGHS as fallback, including when cvxopt is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from firepool.scheduling import OakPolicy, SolverUnavailableError, available_backends
from firepool.scheduling.milp import GLPK, HIGHS, resolve_backend
from firepool.scheduling.synthetic import small_round


def test_glpk_is_the_default_when_installed() -> None:
    assert available_backends() == (GLPK, HIGHS)
    assert resolve_backend(None) == GLPK
    assert OakPolicy().decide(small_round(np.random.default_rng(0))).solver == GLPK


def test_falls_back_to_highs_without_cvxopt(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = small_round(np.random.default_rng(3))
    expected = OakPolicy().decide(rnd)
    monkeypatch.setitem(sys.modules, "cvxopt", None)
    monkeypatch.setitem(sys.modules, "cvxopt.glpk", None)
    assert available_backends() == (HIGHS,)
    result = OakPolicy().decide(rnd)
    assert result.solver == HIGHS
    assert result.objective == pytest.approx(expected.objective, rel=1e-9)
    with pytest.raises(SolverUnavailableError):
        OakPolicy(backend=GLPK).decide(rnd)


def test_unknown_backend() -> None:
    with pytest.raises(SolverUnavailableError):
        resolve_backend("cplex")


def test_milp_policies_work_without_pymoo(monkeypatch: pytest.MonkeyPatch) -> None:
    from firepool.scheduling import OakNsga2Policy

    monkeypatch.setitem(sys.modules, "firepool.scheduling.nsga_ops", None)
    monkeypatch.setitem(sys.modules, "pymoo", None)
    rnd = small_round(np.random.default_rng(4))
    assert OakPolicy().decide(rnd).solver == GLPK
    with pytest.raises(SolverUnavailableError):
        OakNsga2Policy().decide(rnd)

"""A small MILP interface with two interchangeable backends.

`minimize c@x  s.t.  A@x <= b`, each variable either binary or continuous (free). GLPK through
cvxopt is the fast default (sub-millisecond at 14 jobs); HiGHS through `scipy.optimize.milp` is
the fallback and is used automatically when cvxopt is not installed. Which backend solved a round
is reported, so a slow fallback never goes unnoticed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import numpy.typing as npt

from firepool.scheduling.errors import SolverFailedError, SolverUnavailableError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

GLPK = "glpk"
HIGHS = "highs"
BACKENDS = (GLPK, HIGHS)

#: Relative optimality gap at which branch and bound stops. Rounds with many near-identical
#: jobs (Sia's goodput-only score at 500 jobs) are highly symmetric: proving the last 0.01 %
#: can take GLPK minutes, while 0.1 % takes a fraction of a second. Small rounds solve at the
#: root anyway, so this only bounds the pathological large ones.
MIP_GAP = 1e-3
#: Hard wall-clock bound per solve, a safety net only (never reached in the benchmarks); the
#: best solution found so far is used if it triggers.
TIME_LIMIT_S = 10.0


@dataclass(frozen=True, slots=True)
class Milp:
    """A sparse MILP in coordinate form (rows, cols, vals) with `n_rows` inequality rows."""

    c: FloatArray
    rows: IntArray
    cols: IntArray
    vals: FloatArray
    b: FloatArray
    binary: BoolArray  # per variable: True = binary, False = continuous and free

    @property
    def n_vars(self) -> int:
        return int(self.c.shape[0])

    @property
    def n_rows(self) -> int:
        return int(self.b.shape[0])


@dataclass(frozen=True, slots=True)
class MilpSolution:
    x: FloatArray
    objective: float
    backend: str


def _cvxopt_glpk() -> ModuleType | None:
    try:
        return importlib.import_module("cvxopt.glpk")
    except ImportError:
        return None


def _scipy_milp() -> ModuleType | None:
    try:
        return importlib.import_module("scipy.optimize")
    except ImportError:  # pragma: no cover - scipy is a hard dependency
        return None


def available_backends() -> tuple[str, ...]:
    """The backends importable right now, fastest first."""
    out: list[str] = []
    if _cvxopt_glpk() is not None:
        out.append(GLPK)
    if _scipy_milp() is not None:
        out.append(HIGHS)
    return tuple(out)


def resolve_backend(backend: str | None) -> str:
    """None or "auto" picks the fastest installed backend; a named one must be installed."""
    present = available_backends()
    if backend in (None, "auto"):
        if not present:
            raise SolverUnavailableError("no MILP backend installed (need cvxopt or scipy)")
        return present[0]
    if backend not in BACKENDS:
        raise SolverUnavailableError(
            f"unknown MILP backend {backend!r}; choose from {BACKENDS}", field="backend"
        )
    if backend not in present:
        raise SolverUnavailableError(f"MILP backend {backend!r} is not installed", field="backend")
    return backend


def solve(problem: Milp, backend: str | None = None, *, relax: bool = False) -> MilpSolution:
    """Solve `problem` (optimal within `MIP_GAP`) with the chosen or best available backend.

    `relax` solves the LP relaxation instead: binaries become continuous in [0, 1].
    """
    name = resolve_backend(backend)
    if problem.n_vars == 0:
        return MilpSolution(np.zeros(0), 0.0, name)
    if relax:
        problem = _relaxed(problem)
    x = _solve_glpk(problem, relax) if name == GLPK else _solve_highs(problem, relax)
    return MilpSolution(x, float(problem.c @ x), name)


def _relaxed(problem: Milp) -> Milp:
    """Add 0 <= x <= 1 rows for the binaries, so GLPK's free variables stay bounded."""
    idx = np.flatnonzero(problem.binary).astype(np.int64)
    k, base = idx.size, problem.n_rows
    rows = np.concatenate([problem.rows, base + np.arange(k), base + k + np.arange(k)])
    cols = np.concatenate([problem.cols, idx, idx])
    vals = np.concatenate([problem.vals, -np.ones(k), np.ones(k)])
    b = np.concatenate([problem.b, np.zeros(k), np.ones(k)])
    return Milp(problem.c, rows, cols, vals, b, problem.binary)


def _solve_glpk(problem: Milp, relax: bool) -> FloatArray:
    glpk = _cvxopt_glpk()
    cvxopt = importlib.import_module("cvxopt")
    assert glpk is not None
    rows, cols, vals, b = problem.rows, problem.cols, problem.vals, problem.b
    if problem.n_rows == 0:  # GLPK wants at least one row; add a harmless 0 <= 1
        rows, cols, vals, b = (np.array([0]), np.array([0]), np.array([0.0]), np.array([1.0]))
    g = cvxopt.spmatrix(vals.tolist(), rows.tolist(), cols.tolist(), (b.shape[0], problem.n_vars))
    binary = set() if relax else set(np.flatnonzero(problem.binary).tolist())
    status, x = glpk.ilp(
        cvxopt.matrix(problem.c.tolist()),
        g,
        cvxopt.matrix(b.tolist()),
        B=binary,
        options={"msg_lev": "GLP_MSG_OFF", "mip_gap": MIP_GAP,
                 "tm_lim": int(TIME_LIMIT_S * 1000)},
    )
    if status not in ("optimal", "feasible") or x is None:
        raise SolverFailedError(f"GLPK returned status {status!r}")
    out = np.array(x, dtype=np.float64).reshape(-1)
    if not relax:
        out[problem.binary] = np.round(out[problem.binary])
    return out


def _solve_highs(problem: Milp, relax: bool) -> FloatArray:
    scipy_optimize = _scipy_milp()
    assert scipy_optimize is not None
    sparse = importlib.import_module("scipy.sparse")
    lower = np.where(problem.binary, 0.0, -np.inf)
    upper = np.where(problem.binary, 1.0, np.inf)
    constraints = []
    if problem.n_rows:
        a = sparse.csr_array(
            (problem.vals, (problem.rows, problem.cols)), shape=(problem.n_rows, problem.n_vars)
        )
        constraints.append(scipy_optimize.LinearConstraint(a, -np.inf, problem.b))
    res = scipy_optimize.milp(
        problem.c,
        integrality=np.zeros(problem.n_vars) if relax else problem.binary.astype(np.int64),
        bounds=scipy_optimize.Bounds(lower, upper),
        constraints=constraints,
        options={"mip_rel_gap": MIP_GAP, "time_limit": TIME_LIMIT_S},
    )
    if res.x is None:
        raise SolverFailedError(f"HiGHS returned status {res.status}: {res.message}")
    out = np.asarray(res.x, dtype=np.float64)
    if not relax:
        out[problem.binary] = np.round(out[problem.binary])
    return out

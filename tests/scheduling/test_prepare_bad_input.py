"""Bad input is refused with typed errors; unplaceable jobs are reported, not dropped."""

from __future__ import annotations

import math

import pytest

from firepool.model import ErrorCode
from firepool.scheduling import (
    POLICY_NAMES,
    Configuration,
    InvalidGoodputError,
    InvalidRoundInputError,
    JobRoundState,
    RoundInput,
    make_policy,
)
from firepool.scheduling.errors import UnknownPolicyError

C2 = Configuration("A100", 2, 1)
C16 = Configuration("A100", 16, 2)


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf])
def test_bad_goodput_is_a_typed_error(policy: str, bad: float) -> None:
    r = RoundInput({"A100": 4}, (JobRoundState("j", (C2,), (bad,)),))
    with pytest.raises(InvalidGoodputError) as err:
        make_policy(policy).decide(r)
    assert err.value.field == "jobs[0].goodputs[0]"
    assert err.value.code is ErrorCode.VALIDATION


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_job_whose_configurations_all_exceed_the_cluster_is_reported(policy: str) -> None:
    r = RoundInput(
        {"A100": 4},
        (
            JobRoundState("fits", (C2,), (3.0,), t_queue=100.0),
            JobRoundState("too-big", (C16, Configuration("H100", 1, 1)), (9.0, 2.0)),
            JobRoundState("empty", (), ()),
        ),
    )
    result = make_policy(policy).decide(r)
    assert set(result.assignments) == {"fits", "too-big", "empty"}
    assert result.assignments["too-big"] is None
    assert "exceeds" in result.infeasible["too-big"]
    assert "no candidate" in result.infeasible["empty"]
    assert "fits" not in result.infeasible


def test_malformed_rounds_are_refused() -> None:
    with pytest.raises(InvalidRoundInputError, match="goodputs for"):
        make_policy("oak").decide(RoundInput({"A100": 4}, (JobRoundState("j", (C2,), ()),)))
    dup = JobRoundState("j", (C2,), (1.0,))
    with pytest.raises(InvalidRoundInputError, match="duplicate"):
        make_policy("oak").decide(RoundInput({"A100": 4}, (dup, dup)))
    with pytest.raises(InvalidRoundInputError) as err:
        make_policy("oak").decide(
            RoundInput({"A100": 4}, (JobRoundState("j", (C2,), (1.0,), t_queue=-5.0),)))
    assert err.value.field == "jobs[0].t_queue"
    with pytest.raises(InvalidRoundInputError):
        make_policy("oak").decide(RoundInput({"A100": -1}, ()))
    with pytest.raises(InvalidRoundInputError):
        Configuration("A100", 0)
    with pytest.raises(UnknownPolicyError):
        make_policy("fifo")


def test_empty_round() -> None:
    for name in POLICY_NAMES:
        assert make_policy(name).decide(RoundInput({"A100": 4}, ())).assignments == {}

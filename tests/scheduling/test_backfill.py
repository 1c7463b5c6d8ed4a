"""Backfill never overrides the policy where capacity is contended, never exceeds capacity,
keeps idle-left running jobs on their current size first, then serves the longest waiting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from firepool.scheduling import (
    Configuration,
    JobRoundState,
    OakParams,
    OakPolicy,
    RoundInput,
    RoundResult,
)
from firepool.scheduling.backfill import backfill

ONE, TWO, FOUR = (Configuration("gpu", n, 1) for n in (1, 2, 4))


def job(job_id: str, *, current: Configuration | None = None, t_queue: float = 0.0,
        t_progress: float = 0.0, t_ckpt: float = 0.0) -> JobRoundState:
    return JobRoundState(job_id=job_id, configurations=(ONE, TWO, FOUR),
                         goodputs=(1.0, 1.6, 2.2), app="cifar10", t_progress=t_progress,
                         t_ckpt=t_ckpt, t_queue=t_queue, current=current, age_s=1000.0)


def test_a_lone_job_oak_would_preempt_keeps_its_slots() -> None:
    tired = job("a", current=TWO, t_progress=10.0, t_ckpt=20.0)
    round_input = RoundInput({"gpu": 4}, (tired,))
    # OAK read literally (T_ckpt of every restart, r on the current configuration too): the
    # job's utility falls below mu_na and OAK idles the GPUs; backfill keeps them.
    literal = OakPolicy(OakParams(t_ckpt_source="all", r_scope="all"))
    decided = literal.decide(round_input)
    assert decided.assignments["a"] is None
    assert backfill(round_input, decided).assignments["a"] == TWO  # no restart


def test_the_longest_waiting_job_gets_the_best_fitting_size() -> None:
    round_input = RoundInput({"gpu": 4}, (job("new", t_queue=1.0), job("old", t_queue=50.0)))
    decided = RoundResult("none", {"new": None, "old": None})
    out = backfill(round_input, decided).assignments
    assert out == {"old": FOUR, "new": None}


def test_contended_capacity_is_left_to_the_policy() -> None:
    round_input = RoundInput({"gpu": 4}, (job("a", current=TWO), job("b", t_queue=99.0)))
    decided = RoundResult("p", {"a": None, "b": FOUR}, solver="glpk")
    assert backfill(round_input, decided) == decided


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(0, 8),
    jobs=st.lists(
        st.tuples(st.sampled_from([None, ONE, TWO, FOUR]), st.sampled_from([None, ONE, TWO])),
        max_size=6,
    ),
)
def test_never_exceeds_capacity_nor_moves_a_policy_choice(
    capacity: int, jobs: list[tuple[Configuration | None, Configuration | None]]
) -> None:
    states, chosen, used = [], {}, 0
    for k, (current, pick) in enumerate(jobs):
        states.append(job(f"j{k}", current=current, t_queue=float(k)))
        if pick is not None and used + pick.replicas <= capacity:
            chosen[f"j{k}"] = pick
            used += pick.replicas
        else:
            chosen[f"j{k}"] = None
    round_input = RoundInput({"gpu": capacity}, tuple(states))
    out = backfill(round_input, RoundResult("p", chosen))
    assert sum(c.replicas for c in out.assignments.values() if c is not None) <= capacity
    for job_id, pick in chosen.items():
        if pick is not None:
            assert out.assignments[job_id] == pick

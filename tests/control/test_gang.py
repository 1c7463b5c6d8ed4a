"""The gang rule (control/gang.py): one rank failing stops the others, a Ray gang ends with
rank 0, and the attempt's end names the rank that caused it, not those stopped after it."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import firepool
from firepool.control.dispatch import AttemptEnd, judge
from firepool.control.gang import GangExit, GangOver, RankExit, StopRanks, gang_topology
from firepool.model import (
    ElasticSpec,
    JobErrorClass,
    JobKind,
    JobSpec,
    JobState,
    Topology,
)

PODS = ("p0", "p1", "p2")
TERM = RankExit(None, signal=15)
OK = RankExit(0)


def ended(actions: list[object]) -> AttemptEnd:
    overs = [a for a in actions if isinstance(a, GangOver)]
    assert len(overs) == 1, actions
    return overs[0].end


def test_a_failing_rank_stops_the_others_and_is_the_cause() -> None:
    gang = GangExit(PODS)
    assert gang.woke({"p1": RankExit(7)}) == [StopRanks()]
    # The ranks the broker stopped exit by signal: they are not the cause.
    end = ended(gang.woke({"p0": TERM, "p2": TERM}))
    assert (end.exit_code, end.signal) == (7, None)
    assert end.message == "rank 1 failed first; the other ranks were stopped"
    assert judge(end, 0, 0) == judge(AttemptEnd(exit_code=7, message=end.message), 0, 0)
    assert judge(end, 0, 0).error_class is JobErrorClass.NON_ZERO_EXIT


def test_the_stop_is_asked_again_while_a_failure_has_ranks_running() -> None:
    gang = GangExit(PODS)
    gang.woke({"p2": RankExit(None, signal=9)})
    assert gang.woke() == [StopRanks()]  # a poll period passed, p0 and p1 still run
    assert gang.woke({"p0": TERM}) == [StopRanks()]
    assert ended(gang.woke({"p1": TERM})).signal == 9


def test_a_clean_rank_does_not_stop_a_plain_gang() -> None:
    gang = GangExit(PODS)
    assert gang.woke({"p0": OK}) == []
    assert gang.woke({"p1": OK}) == []
    end = ended(gang.woke({"p2": OK}))
    assert (end.exit_code, end.message) == (0, None)


def test_the_last_rank_failing_after_rank_0_succeeded_fails_the_attempt() -> None:
    gang = GangExit(PODS[:2])
    gang.woke({"p0": OK})
    end = ended(gang.woke({"p1": RankExit(3)}))
    assert end.exit_code == 3 and judge(end, 0, 0).state is JobState.FAILED


def test_the_first_of_two_failures_in_one_wake_up_is_the_lower_rank() -> None:
    gang = GangExit(PODS)
    gang.woke({"p2": RankExit(5), "p1": RankExit(4)})
    assert gang.first_failure == "p1"


def test_a_ray_gang_ends_with_rank_0_and_its_stopped_nodes_are_no_failure() -> None:
    gang = GangExit(PODS, ray=True)
    assert gang.woke({"p0": OK}) == [StopRanks()]
    end = ended(gang.woke({"p1": TERM, "p2": TERM}))
    assert judge(end, 0, 0).state is JobState.SUCCEEDED
    plain = GangExit(PODS)  # the same exits fail a gang that is no Ray gang
    plain.woke({"p0": OK})
    assert plain.woke({"p1": TERM, "p2": TERM}) != [StopRanks()]
    assert judge(plain.end(), 0, 0).error_class is JobErrorClass.KILLED


def test_a_ray_node_failing_before_the_driver_is_the_cause() -> None:
    gang = GangExit(PODS, ray=True)
    assert gang.woke({"p2": RankExit(1)}) == [StopRanks()]
    end = ended(gang.woke({"p0": TERM, "p1": TERM}))
    assert end.exit_code == 1 and "rank 2" in (end.message or "")


def test_a_cancel_stops_every_wake_up_and_no_rank_is_a_cause_after_it() -> None:
    gang = GangExit(PODS)
    assert gang.woke(cancel=True) == [StopRanks()]
    assert gang.woke({"p1": TERM}) == [StopRanks()]  # the cancel stands
    end = ended(gang.woke({"p0": TERM, "p2": RankExit(2)}))
    assert end.cancelled and end.message is None
    assert judge(end, 0, 5).state is JobState.CANCELLED


def test_a_graceful_stop_is_asked_once_and_never_after_a_cancel() -> None:
    gang = GangExit(PODS)
    assert gang.woke(stop=True) == [StopRanks(graceful=True)]
    assert gang.woke(stop=True) == []
    assert gang.woke({"p1": RankExit(143)}) == []  # exits after a resize are no failures
    end = ended(gang.woke({"p0": OK, "p2": OK}))
    assert end.exit_code == 0 and not end.cancelled
    cancelled = GangExit(PODS)
    cancelled.woke(cancel=True)
    assert cancelled.woke(stop=True) == [StopRanks()]  # the cancel's stop, never graceful
    assert not cancelled.stopping


def test_a_lost_agent_ends_the_attempt_at_once() -> None:
    gang = GangExit(PODS)
    gang.woke({"p0": OK})
    actions = gang.lost("p2")
    assert actions[0] == StopRanks()
    end = ended(actions)
    assert end.pod_lost and end.message == "pod p2 stopped answering"
    assert gang.woke({"p1": OK, "p2": OK}) == [] and gang.lost("p1") == []


def test_a_rank_killed_with_its_ending_pod_is_a_lost_pod_not_a_killed_job() -> None:
    """An agent that ends its pod (deleted, or fenced after its broker's silence) kills the
    rank with it: a lost pod, retried as one, never the job's own Killed."""
    gang = GangExit(PODS[:2])
    actions = gang.woke({"p1": RankExit(None, signal=9, pod_ended=True)})
    assert actions[0] == StopRanks()
    end = ended(actions)
    assert end.pod_lost and end.signal is None and end.message == "pod p1 ended under its rank"
    verdict = judge(end, 0, 1)
    assert (verdict.state, verdict.error_class) == (JobState.QUEUED, JobErrorClass.POD_LOST)
    assert gang.woke({"p0": TERM}) == []


def test_a_pod_ending_after_a_cancel_leaves_the_job_cancelled() -> None:
    gang = GangExit(PODS[:1])
    assert gang.woke(cancel=True) == [StopRanks()]
    end = ended(gang.woke({"p0": RankExit(None, signal=9, pod_ended=True)}))
    assert judge(end, 0, 1).state is JobState.CANCELLED


def test_any_ranks_oom_or_timeout_is_the_attempts() -> None:
    gang = GangExit(PODS[:2])
    gang.woke({"p1": RankExit(None, signal=9, oom=True)})
    end = ended(gang.woke({"p0": RankExit(None, signal=15, timed_out=True)}))
    assert end.oom and end.timed_out
    assert judge(end, 0, 0).error_class is JobErrorClass.TIMEOUT


def test_a_repeated_or_unknown_exit_changes_nothing() -> None:
    gang = GangExit(PODS[:2])
    gang.woke({"p1": OK})
    assert gang.woke({"p1": RankExit(9), "px": RankExit(9)}) == []
    assert gang.first_failure is None


codes = st.sampled_from([0, 0, 1, 7])


@given(st.lists(codes, min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_the_cause_is_the_first_rank_to_fail_on_its_own(
    exit_codes: list[int], rng: random.Random
) -> None:
    """Ranks exit one at a time in any order; after the first failure the rest are stopped
    (SIGTERM). The end is that failure's, or rank 0's when none failed."""
    pods = [f"p{i}" for i in range(len(exit_codes))]
    order = pods[:]
    rng.shuffle(order)
    gang = GangExit(pods)
    first: str | None = None
    actions: list[object] = []
    for pod in order:
        if pod in gang.exits:
            continue
        code = exit_codes[pods.index(pod)]
        actions = list(gang.woke({pod: RankExit(code)}))
        if code and first is None:
            first = pod
        if StopRanks() in actions:
            actions = list(gang.woke(dict.fromkeys(gang.pending, TERM)))
            break
    end = ended(actions)
    if first is None:
        assert (end.exit_code, end.signal) == (0, None)
    else:
        assert end.exit_code == exit_codes[pods.index(first)]
        assert (end.message is None) == (first == "p0")


def test_only_a_ray_task_is_a_gang_that_ends_with_rank_0() -> None:
    def spec(topology: str) -> JobSpec:
        return JobSpec(pool="cpu", command=["x"], pods=2, topology=topology)

    assert GangExit.of(PODS, spec("ray")).ray
    assert not GangExit.of(PODS, spec("torchrun")).ray and not GangExit.of(PODS, spec("none")).ray
    # An elastic job's ranks are torchrun's whatever its world size: never a Ray gang.
    elastic = JobSpec(
        pool="cpu",
        command=["x"],
        kind=JobKind.ELASTIC,
        elastic=ElasticSpec(app="cifar10", min_pods=1, max_pods=4),
    )
    assert gang_topology(elastic) is Topology.TORCHRUN
    assert not GangExit.of(PODS, elastic).ray


SRC = Path(firepool.__file__).parent
#: What the gang-exit rule is made of, as the service's driver spelled it before the rule
#: moved here: the cause's bookkeeping, the per-rank failure test, the verdict's wording, and
#: the Ray gang's end with rank 0. A driver that decides a gang's end again needs one of them.
RULE = {
    "the rank that failed first": r"\bfirst_failure\b",
    "a rank's failure test": r"\b_?failed\(|\.failed\b",
    "the cause's message": r"failed first",
    "a Ray gang's end": r"\bTopology\.RAY\b",
}
#: Where the drivers may still name Ray: the Ray nodes' variables (no exit decision).
RAY_ENV = SRC / "service" / "gang_env.py"


@pytest.mark.parametrize("what", sorted(RULE))
def test_no_gang_exit_rule_is_left_in_a_driver(what: str) -> None:
    """The drivers only feed the gang rule and carry out its actions (DESIGN.md: no rule of
    either paper lives in a driver). Each pattern matches the rule's own module, so a search
    that finds nothing in service/ and sim/ says something."""
    pattern = re.compile(RULE[what])
    assert pattern.search((SRC / "control" / "gang.py").read_text()), what
    found = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for folder in ("service", "sim")
        for path in sorted((SRC / folder).rglob("*.py"))
        if path != RAY_ENV
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, f"{what} in a driver: {found}"


def test_both_drivers_feed_the_gang_rule() -> None:
    for driver in ("service/attempt.py", "sim/broker.py"):
        assert "GangExit.of(" in (SRC / driver).read_text(), driver

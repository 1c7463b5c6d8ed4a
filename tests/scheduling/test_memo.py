"""scheduling/memo.py: what a round derives from a job's configurations is computed once per
configurations tuple and context, and never served for a sequence that may have changed."""

from __future__ import annotations

from firepool.scheduling.memo import ConfigurationsMemo
from firepool.scheduling.rounds import Configuration


def counting() -> tuple[ConfigurationsMemo[tuple[Configuration, ...], int, int], list[int]]:
    calls: list[int] = []

    def compute(configurations: tuple[Configuration, ...], context: int) -> int:
        calls.append(context)
        return sum(c.replicas for c in configurations) * context

    return ConfigurationsMemo(compute, max_entries=2), calls


def test_a_tuple_is_computed_once_per_context() -> None:
    memo, calls = counting()
    configs = (Configuration("a100", 1), Configuration("a100", 2))
    assert memo.of(configs, 1) == 3 and memo.of(configs, 1) == 3
    assert calls == [1]
    assert memo.of(configs, 10) == 30  # another cluster: computed afresh
    assert calls == [1, 10]


def test_an_equal_tuple_of_its_own_is_computed_for_itself() -> None:
    memo, calls = counting()
    memo.of((Configuration("a100", 1),), 1)
    memo.of((Configuration("a100", 1),), 1)
    assert calls == [1, 1]


def test_a_list_is_never_remembered_since_it_can_change_in_place() -> None:
    memo, calls = counting()
    configs = [Configuration("a100", 1)]
    assert memo.of(configs, 1) == 1  # type: ignore[arg-type]
    configs.append(Configuration("a100", 4))
    assert memo.of(configs, 1) == 5  # type: ignore[arg-type]
    assert calls == [1, 1]


def test_the_memo_is_bounded() -> None:
    memo, calls = counting()
    kept = [(Configuration("a100", n),) for n in (1, 2, 3)]
    for configs in kept:
        memo.of(configs, 1)
    assert len(memo._entries) <= 2
    memo.of(kept[2], 1)  # the newest survived the clearing
    assert calls == [1, 1, 1]

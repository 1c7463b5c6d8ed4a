"""`fast_frozen_init`: the same record as the dataclass's own `__init__` builds, still frozen."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field

import pytest

from firepool.control.dispatch import AttemptEnd
from firepool.control.records import ClaimRequest
from firepool.control.scaler import Census
from firepool.model import JobState
from firepool.model.frozen_init import fast_frozen_init
from firepool.store.records import JobRecord


def _plain() -> type:
    """The same fields as `_fast()` builds, with the dataclass's own `__init__`."""

    @dataclass(frozen=True, slots=True)
    class Row:
        name: str
        size: int = 3
        tags: list[str] = field(default_factory=list)
        derived: str = field(init=False, compare=True)
        flag: bool = field(default=False, kw_only=True)

        def __post_init__(self) -> None:
            object.__setattr__(self, "derived", f"{self.name}:{self.size}")

    return Row


def _fast() -> type:
    return fast_frozen_init(_plain())


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("a",), {}),
        (("a", 5), {}),
        (("a", 5, ["x"]), {"flag": True}),
        ((), {"name": "b", "tags": ["y"], "flag": True}),
    ],
)
def test_the_fast_init_builds_what_the_dataclass_init_builds(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    plain, fast = _plain()(*args, **kwargs), _fast()(*args, **kwargs)
    assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
    assert repr(fast).split("(", 1)[1] == repr(plain).split("(", 1)[1]


def test_each_default_factory_call_gives_a_new_object() -> None:
    row = _fast()
    assert row("a").tags is not row("a").tags


def test_the_record_stays_frozen_and_hashable() -> None:
    row = _fast()("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.size = 4
    assert hash(_fast()("a", tags=())) == hash(_fast()("a", tags=()))


def test_bad_arguments_fail_as_the_dataclass_init_fails() -> None:
    row = _fast()
    with pytest.raises(TypeError, match="name"):
        row()
    with pytest.raises(TypeError, match="positional arguments"):
        row("a", 1, [], True)  # `flag` stays keyword-only
    with pytest.raises(TypeError, match="colour"):
        row("a", colour="red")


def test_the_signature_is_the_dataclass_signature() -> None:
    plain, fast = inspect.signature(_plain().__init__), inspect.signature(_fast().__init__)
    assert [(p.name, p.kind) for p in fast.parameters.values()] == [
        (p.name, p.kind) for p in plain.parameters.values()
    ]


def test_what_is_not_a_frozen_slotted_dataclass_is_refused() -> None:
    @dataclass(slots=True)
    class Mutable:
        x: int

    @dataclass(frozen=True)
    class NoSlots:
        x: int

    class NotADataclass:
        pass

    for cls in (Mutable, NoSlots, NotADataclass):
        with pytest.raises(TypeError, match="frozen=True, slots=True"):
            fast_frozen_init(cls)


def test_an_initvar_is_refused_rather_than_dropped() -> None:
    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        x: int
        seed: dataclasses.InitVar[int]

        def __post_init__(self, seed: int) -> None:
            pass

    with pytest.raises(TypeError, match="parameters"):
        fast_frozen_init(WithInitVar)


def test_the_hot_records_keep_their_meaning() -> None:
    """The records the decorator is applied to: defaults, derived fields and equality."""
    job = JobRecord("j1", "alice", None, JobState.QUEUED, 1)  # type: ignore[arg-type]
    assert (job.retries, job.timings, job.pods, job.reclaims) == (0, {}, (), 0)
    assert job == JobRecord("j1", "alice", None, JobState.QUEUED, 1)  # type: ignore[arg-type]
    claim = ClaimRequest("j1", "alice", "cpu", tag="t")
    assert claim.session == ("alice", "default", "t", None) and claim.simple
    assert Census(idle=2) == Census(0, 2)
    assert AttemptEnd(exit_code=3).exit_code == 3 and not AttemptEnd().oom

"""Callers as generator programs: a workload is written as straight-line code.

A program yields `Sleep(seconds)` to think, or `Run(jobs)` to submit jobs together and resume
when all of them have finished (a barrier), receiving their `JobStats`. The runner turns each
yield into events on the loop, so agents, RL trainers and sessions read like the scripts they
model.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Union

from firepool.sim.broker import JobRequest, JobStats, SimBroker


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Run:
    jobs: Sequence[JobRequest]


Command = Union[Sleep, Run]  # noqa: UP007 - a runtime alias
Program = Generator[Command, "list[JobStats] | None", None]


class _Barrier:
    """The jobs of one `Run`: the program resumes when the last of them finishes."""

    __slots__ = ("done", "left", "program", "runner")

    def __init__(self, runner: Runner, program: Program, n: int) -> None:
        self.runner = runner
        self.program = program
        self.left = n
        self.done: list[JobStats] = []

    def job_done(self, st: JobStats) -> None:
        self.done.append(st)
        self.left -= 1
        if self.left == 0:
            self.runner._step((self.program, self.done))


class Runner:
    """Steps programs on a broker's loop; `finished_at` is when the last one ended."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker
        self.loop = broker.loop
        self.active = 0
        self.started_at = -1.0
        self.finished_at = -1.0

    def start(self, program: Program, at: float | None = None) -> None:
        self.active += 1
        when = self.loop.now if at is None else at
        if self.started_at < 0.0 or when < self.started_at:
            self.started_at = when
        self.loop.at(when, self._step, (program, None))

    def _step(self, arg: tuple[Program, list[JobStats] | None]) -> None:
        program, value = arg
        try:
            cmd = program.send(value)
        except StopIteration:
            self.active -= 1
            self.finished_at = max(self.finished_at, self.loop.now)
            if self.active == 0:
                self.broker.stop()
            return
        if isinstance(cmd, Sleep):
            self.loop.after(cmd.seconds, self._step, (program, None))
            return
        if not cmd.jobs:
            self.loop.after(0.0, self._step, (program, []))
            return
        barrier = _Barrier(self, program, len(cmd.jobs))
        for req in cmd.jobs:
            self.broker.submit(req, barrier.job_done)

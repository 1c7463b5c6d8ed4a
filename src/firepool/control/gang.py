"""How a gang's attempt ends: every rank's exit in, "stop the others" and the attempt's end out.

A gang runs one process per pod. Its ranks live and die together, so one rank's own failure
stops the rest; a Ray gang is its driver on rank 0 (the other nodes only serve it), so it ends
when rank 0 does; and the attempt's verdict must name the rank that caused the end, not the
ranks the broker stopped because of it. The service (real agents) and the simulator (virtual
ranks) both feed their ranks' exits through `GangExit`, so the two cannot tell a gang's end
apart. No I/O: the driver stops ranks and waits for exits; this object only decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from firepool.control.dispatch import AttemptEnd
from firepool.model import JobKind, JobSpec, Topology


def gang_topology(spec: JobSpec) -> Topology:
    """How a job's ranks are wired. An elastic job always gets torchrun's rank variables: its
    world size changes from attempt to attempt, and only torchrun's rendezvous follows that.
    Both the rank variables and the exit rule (a Ray gang ends with rank 0) follow from this,
    so the drivers ask here instead of each reading `spec.topology`."""
    if spec.kind is JobKind.ELASTIC:
        return Topology.TORCHRUN
    return spec.topology


class RankExit(NamedTuple):
    """What one rank's process did, as its agent (or the simulator) reported it."""

    exit_code: int | None
    signal: int | None = None
    oom: bool = False
    timed_out: bool = False
    #: Its agent ended the pod under it (deleted, or fenced after its broker's silence): the
    #: process was killed with its pod, which says nothing of the job.
    pod_ended: bool = False

    @property
    def failed(self) -> bool:
        """A rank that failed on its own: it takes the gang down with it."""
        return not self.pod_ended and (self.exit_code != 0 or self.signal is not None or self.oom)


class StopRanks(NamedTuple):
    """Stop every rank still running; `graceful`: SIGTERM with the resize grace (the job
    checkpoints), otherwise the ordinary stop."""

    graceful: bool = False


class GangOver(NamedTuple):
    """The attempt is over (every rank exited, or a pod was lost): judge `end`."""

    end: AttemptEnd


GangAction = StopRanks | GangOver


@dataclass(slots=True)
class GangExit:
    """One attempt's ranks, from launch to its end. The driver reports each wake-up of its
    wait (`woke`: the exits that arrived, whether a cancel or a graceful stop is asked) and a
    lost agent (`lost`), and carries out what comes back: at most one `StopRanks` per wake-up,
    or a `GangOver` (then the attempt is over)."""

    pods: Sequence[str]  # in rank order
    #: A Ray gang is its driver on rank 0: it ends when rank 0 exits.
    ray: bool = False
    #: Every rank's exit so far, in the order they arrived (rank order within one wake-up).
    exits: dict[str, RankExit] = field(default_factory=dict)
    cancelled: bool = False
    #: The broker stopped the ranks for a reason that is no failure (a graceful resize, or a
    #: Ray driver that exited): exits after that are not the gang's cause.
    stopping: bool = False
    #: The rank that failed on its own before any stop: it ended the gang.
    first_failure: str | None = None
    over: bool = False

    @classmethod
    def of(cls, pods: Sequence[str], spec: JobSpec) -> GangExit:
        """The gang of an attempt of `spec` on `pods` (rank order)."""
        return cls(pods, ray=gang_topology(spec) is Topology.RAY)

    @property
    def pending(self) -> list[str]:
        """The ranks still running (no exit yet), in rank order."""
        return [p for p in self.pods if p not in self.exits]

    def woke(
        self,
        exits: Mapping[str, RankExit] | None = None,
        *,
        cancel: bool = False,
        stop: bool = False,
    ) -> list[GangAction]:
        """One wake-up: `exits` that arrived since the last (a repeated one changes nothing),
        `cancel` once the caller cancelled (it stands from then on: the stop is asked again
        at every wake-up, so a stop an agent missed cannot leave a rank running), `stop` for
        a graceful stop that is no cancel (an elastic resize: once, never after a cancel)."""
        if self.over:
            return []
        arrived = [p for p in self.pods if exits and p in exits and p not in self.exits]
        for pod in arrived:
            assert exits is not None
            self.exits[pod] = exits[pod]
        self.cancelled |= cancel
        ended = next((p for p in arrived if self.exits[p].pod_ended), None)
        if ended is not None:
            return self._pod_gone(f"pod {ended} ended under its rank")
        pending = bool(self.pending)
        if self.cancelled and pending:
            return [StopRanks()]
        if stop and not self.stopping and pending:
            self.stopping = True
            return [StopRanks(graceful=True)]
        if self.ray and not self.stopping and pending and self.pods[0] in self.exits:
            # A Ray gang is its driver: the other nodes are stopped, not failed, once it exits.
            self.stopping = True
            return [StopRanks()]
        if self.first_failure is None and not self.stopping and not self.cancelled:
            self.first_failure = next((p for p, e in self.exits.items() if e.failed), None)
        if not pending:
            self.over = True
            return [GangOver(self.end())]
        return [StopRanks()] if self.first_failure is not None else []

    def lost(self, pod: str) -> list[GangAction]:
        """A rank's agent stopped answering for good: stop what is left, the attempt ends
        with a lost pod (its pod is deleted, never reset)."""
        if self.over:
            return []
        return self._pod_gone(f"pod {pod} stopped answering")

    def _pod_gone(self, message: str) -> list[GangAction]:
        self.over = True
        end = AttemptEnd(pod_lost=True, cancelled=self.cancelled, message=message)
        return [StopRanks(), GangOver(end)]

    def end(self) -> AttemptEnd:
        """The attempt's end once every rank exited: rank 0's exit, unless another rank failed
        first and the rest were stopped because of it, then that rank's; any rank's OOM or
        timeout is the attempt's."""
        cause = self.first_failure or self.pods[0]
        exited = self.exits[cause]
        rank = list(self.pods).index(cause)
        return AttemptEnd(
            exit_code=exited.exit_code,
            signal=exited.signal,
            oom=any(e.oom for e in self.exits.values()),
            timed_out=any(e.timed_out for e in self.exits.values()),
            cancelled=self.cancelled,
            message=f"rank {rank} failed first; the other ranks were stopped" if rank else None,
        )

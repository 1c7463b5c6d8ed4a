"""The I/O of one attempt along the five-step job path of DESIGN.md.

claim (the core's dispatch pass) -> prepare -> durable commit conditional on the job's version
-> mark pods -> launch (once the core says go: after the commit and the GPU gate); then wait
for every rank's exit, reset every pod and write the verdict the core decided. No user code
runs before the commit; the broker reports every outcome to the core.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from firepool.control.dispatch import AttemptEnd, Verdict
from firepool.control.gang import (
    GangAction,
    GangExit,
    GangOver,
    RankExit,
    StopRanks,
    gang_topology,
)
from firepool.control.records import Lease, Ticket
from firepool.model import (
    FirepoolError,
    JobState,
    LostRaceError,
    NotFoundError,
    UnavailableError,
)
from firepool.protocol import (
    DependencyInstallFailedError,
    ExitEvent,
    InlineOutput,
    LaunchRequest,
    LogAck,
    PackageRef,
    RequirementsRef,
    StopReason,
    fenced_within_s,
)
from firepool.service.gang_env import gang_env
from firepool.service.outage import until_stored
from firepool.service.pods import PodManager
from firepool.store import AsyncWrites, JobRecord, JobStore, PodBinding
from firepool.store.logs import STREAMS, StreamOffsets
from firepool.store.records import timings

log = logging.getLogger("firepool.service.attempt")


class LogSink(Protocol):
    """What the driver needs of log storage: appending an attempt's output as it arrives."""

    def append(self, job_id: str, retry: int, data: bytes) -> None: ...


@runtime_checkable
class RankLogSink(Protocol):
    """A log storage that keeps every rank's streams resumable at byte offsets
    (`store.logs.RankLogStorage`): with one, every rank is pumped, a re-attached attempt
    resumes where the store stopped, and the agent is told what it may drop."""

    def offsets(self, job_id: str, retry: int, rank: int) -> StreamOffsets: ...

    def append_stream(
        self, job_id: str, retry: int, rank: int, stream: str, offset: int, data: bytes
    ) -> int: ...

    def note(self, job_id: str, retry: int, rank: int, text: str) -> None: ...


@dataclass
class Running:
    """The broker's handle on a live attempt: cancellation, gate and exit futures."""

    job: JobRecord
    lease: Lease
    #: The core's view of the job (`job` is the stored row, re-read at the commit).
    ticket: Ticket
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    #: A graceful stop that is not a cancel (an elastic resize): SIGTERM, let it checkpoint.
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    #: Variables on top of the topology's (an elastic attempt's checkpoint dir, progress token).
    extra_env: dict[str, str] = field(default_factory=dict)
    exits: dict[str, asyncio.Future[ExitEvent]] = field(default_factory=dict)
    launched: bool = False
    #: When the first rank started (None until launched): the metrics' start latency.
    first_instruction: float | None = None
    log_pump: asyncio.Task[None] | None = None
    #: Starts the log pump once the attempt has run `live_output_after_s` (cancelled when
    #: it exited before: its output then came with the exit events).
    pump_timer: asyncio.TimerHandle | None = None
    #: Per pod, what the broker stored of the output that came with its exit event: the
    #: reset acknowledges it (None: the pump acknowledges, or nothing was stored inline).
    acks: dict[str, LogAck] | None = None
    marking: asyncio.Task[bool] | None = None
    #: The write of the start stamps (`AttemptRunner._record_start`), once launched.
    start_stamps: asyncio.Task[None] | None = None
    #: Pods whose agents stopped answering: never waited on again (stop, reset), deleted.
    lost: set[str] = field(default_factory=set)

    async def record_with_start(self) -> JobRecord:
        """The attempt's record once the write of its start stamps is over, stored or not.
        The verdict's record is built from it: carrying the stamps, it is the stored row, and
        a long poll answers with it unread. Without this wait a short job's exit often came
        before the stamps' commit (under `bench throughput` almost every job's did), and each
        answer cost a read. The wait costs a verdict nothing it would not wait for anyway: the
        stamps' write was queued at the launch, ahead of the verdict's in the same committer,
        and while the store is away both wait for it."""
        if self.start_stamps is not None and not self.start_stamps.done():
            await asyncio.wait({self.start_stamps})
        return self.job


class AttemptRunner:
    """The I/O of one attempt: commit, launch on every rank, wait for the exits, reset, and
    write the verdict. What happens between those steps is the core's decision."""

    def __init__(
        self,
        *,
        store: JobStore,
        pods: PodManager,
        logs: LogSink,
        clock: Callable[[], float],
        package_url: Callable[[str], str],
        exit_poll_s: float = 2.0,
        exit_wait_s: float = 15.0,
        stop_grace_s: float = 10.0,
        log_drain_s: float = 5.0,
        lost_after_polls: int = 3,
        resize_grace_s: float = 30.0,
        live_output_after_s: float = 0.25,
        silence_s: Callable[[str], float | None] = lambda pool: None,
    ) -> None:
        self.store = store
        self.pods = pods
        self.logs = logs
        self.clock = clock
        self.package_url = package_url
        self.exit_poll_s = exit_poll_s
        self.exit_wait_s = exit_wait_s
        self.stop_grace_s = stop_grace_s
        self.log_drain_s = log_drain_s
        self.lost_after_polls = lost_after_polls
        self.resize_grace_s = resize_grace_s
        #: A running attempt's output is followed live only once it has run this long: a
        #: shorter one sends its output with its exit (three calls to the agent fewer).
        self.live_output_after_s = live_output_after_s
        #: A pool's agents' broker-silence bound (None: they never fence themselves).
        self.silence_s = silence_s
        #: The store's event-loop writes, when it has them (looked up once): the hot path's
        #: commits are then awaited without parking a worker thread on each.
        self._async: AsyncWrites | None = store if isinstance(store, AsyncWrites) else None

    async def commit(self, running: Running) -> JobRecord | None:
        """Step 3: QUEUED -> RUNNING with the lease's bindings, conditional on the row's
        version; None when it lost a race (the store has the job's truth). While the store is
        unavailable the commit is tried again (no user code runs meanwhile); a try that lost
        its race after an outage may have lost it to its own earlier try, whose COMMIT landed
        but whose answer did not: the row then shows this very start, which is kept."""
        job, lease = running.job, running.lease
        bindings = [
            PodBinding(i, p.name, p.path, p.reason.value, lease.pool)
            for i, p in enumerate(lease.pods)
        ]
        tries = 0

        async def start() -> JobRecord:
            nonlocal tries
            tries += 1
            if self._async is not None:
                return await self._async.start_async(job, bindings, now=self.clock())
            return await asyncio.to_thread(self.store.start, job, bindings, now=self.clock())

        try:
            started = await until_stored(start, what=f"the start of {job.attempt}")
        except LostRaceError:
            if tries == 1:
                return None
            found = await until_stored(
                lambda: asyncio.to_thread(self.store.get, job.id), what=f"job {job.id}"
            )
            if found is None or not _our_start(found, job, bindings):
                return None
            started = found
        running.job = started
        return started

    async def run(self, running: Running) -> AttemptEnd:
        """Wait for the core's go (the gate), launch every rank, wait for their exits."""
        return await self._launch_and_wait(running)

    async def resume(self, running: Running) -> AttemptEnd:
        """An attempt re-attached after a broker restart: pump its output on from where the
        log store stopped, and wait for its exit."""
        self.start_log_pump(running)
        return await self._wait_exit(running)

    def start_log_pump(self, running: Running) -> None:
        """Copy the attempt's output into the log store while it runs: every rank's streams
        with a rank-aware store, rank 0's otherwise (a store without offsets)."""
        if running.log_pump is not None:
            return
        job, pods = running.job, running.lease.pods
        if isinstance(self.logs, RankLogSink):
            running.log_pump = asyncio.ensure_future(
                self._pump_ranks(job, [p.name for p in pods], self.logs)
            )
        else:
            running.log_pump = asyncio.ensure_future(self._pump_logs(job, pods[0].name))

    async def drain_logs(self, running: Running) -> None:
        """Have the attempt's whole output stored: from its exit events when every rank sent
        it there and no pump had started, from the pump otherwise."""
        if running.pump_timer is not None:
            running.pump_timer.cancel()
        if running.log_pump is None and running.launched:
            sink = self.logs
            outputs = _inline_outputs(running)
            if outputs is not None and isinstance(sink, RankLogSink):
                if any(o.stdout or o.stderr for o in outputs.values()):
                    running.acks = await asyncio.to_thread(
                        _store_inline, sink, running.job, outputs
                    )
                else:  # a silent attempt: nothing to store, no thread to wake
                    running.acks = {pod: LogAck() for pod in outputs}
                return
            self.start_log_pump(running)
        if running.log_pump is not None:
            # A terminal job's log is complete: the agent ends its follow stream at exit.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(running.log_pump), self.log_drain_s)

    async def _launch_and_wait(self, running: Running) -> AttemptEnd:
        job, lease = running.job, running.lease
        if not running.gate.is_set():
            await _first(running.gate.wait(), running.cancel.wait(), running.stop.wait())
        if running.cancel.is_set():
            return AttemptEnd(cancelled=True, message="cancelled before start")
        if running.stop.is_set():
            return AttemptEnd(exit_code=0, message="stopped before it started")
        loop = asyncio.get_running_loop()
        for p in lease.pods:
            running.exits[p.name] = loop.create_future()
        try:
            ranks = gang_env(gang_topology(job.spec), [self._address(p.name) for p in lease.pods])
            started = await asyncio.gather(
                *(
                    self._launch_one(job, lease, rank, {**env, **running.extra_env})
                    for rank, env in enumerate(ranks)
                )
            )
        except DependencyInstallFailedError as exc:
            return AttemptEnd(dependency_failed=True, message=exc.message)
        except (FirepoolError, OSError) as exc:
            await self._stop_all(running)
            return AttemptEnd(launch_failed=True, message=str(exc))
        running.launched = True
        first = running.first_instruction = min(started)
        running.start_stamps = self.pods.spawn(self._record_start(running, first))
        if isinstance(self.logs, RankLogSink):
            running.pump_timer = asyncio.get_running_loop().call_later(
                self.live_output_after_s, self.start_log_pump, running
            )
        else:
            self.start_log_pump(running)
        return await self._wait_exit(running)

    async def _record_start(self, running: Running, at: float) -> None:
        """Off the critical path: the attempt already runs. The process start is the first
        instant user code can run; a job that reports its own first instruction refines it.
        Once stored, the stamps go into the attempt's record too: the verdict's record, built
        from it, is then the stored row, which a long poll may answer with unread."""
        job = running.job
        stamps = {"started": at, "first_instruction": at}

        async def write() -> None:
            if self._async is not None:
                await self._async.record_timings_async(job, stamps)
            else:
                await asyncio.to_thread(self.store.record_timings, job, stamps)

        await until_stored(write, what=f"the start time of {job.attempt}")
        running.job = replace(running.job, timings=timings(running.job.timings, **stamps))

    async def _launch_one(
        self, job: JobRecord, lease: Lease, rank: int, topology_env: dict[str, str]
    ) -> float:
        spec = job.spec
        pod = lease.pods[rank].name
        record = self.pods.records[pod]
        package = None
        if spec.package is not None:
            package = PackageRef(
                digest=spec.package,
                url=self.package_url(spec.package),
                authorization=f"Bearer {record.secret}",
            )
        response = await self.pods.agent(pod).launch(
            LaunchRequest(
                attempt=job.attempt,
                argv=list(spec.command),
                env=dict(spec.env),
                topology_env=topology_env,
                package=package,
                requirements=RequirementsRef.of(spec.requirements) if spec.requirements else None,
                timeout_s=spec.timeout_s,
                awaits_exit=True,  # asked for by `_await_exit`, never pushed
            )
        )
        return response.started_at

    def _address(self, pod: str) -> str:
        """A pod's address (a pod IP on a cluster); rank 0's is where the gang rendezvouses."""
        record = self.pods.records.get(pod)
        return record.address if record is not None and record.address else "127.0.0.1"

    async def _wait_exit(self, running: Running) -> AttemptEnd:
        """Every rank's exit event, reported to the gang rule (`control/gang.py`), which says
        when to stop the other ranks and what the attempt's end is."""
        job, lease = running.job, running.lease
        pending = dict(running.exits)
        silent: dict[str, tuple[int, float]] = {}  # failed polls in a row, since when
        gang = GangExit.of([p.name for p in lease.pods], job.spec)
        cancel_task = asyncio.ensure_future(running.cancel.wait())
        stop_task = asyncio.ensure_future(running.stop.wait())
        asking = [
            asyncio.ensure_future(self._await_exit(job.attempt, pod, fut))
            for pod, fut in pending.items()
        ]
        try:
            while True:
                waiting: list[asyncio.Future[Any]] = [*pending.values(), cancel_task]
                if not gang.stopping:
                    waiting.append(stop_task)
                done, _ = await asyncio.wait(
                    waiting,
                    timeout=self.exit_poll_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                exits: dict[str, RankExit] = {}
                for pod, fut in list(pending.items()):
                    if fut.done():
                        exits[pod] = _rank_exit(fut.result())
                        del pending[pod]
                        if exits[pod].pod_ended:
                            running.lost.add(pod)  # deleted, never reset
                actions: list[GangAction] = []
                if not done:
                    lost = await self._poll_exits(job, pending, silent)
                    if lost:
                        # An agent that stays unreachable has lost its pod: its pod is not
                        # reset but deleted.
                        running.lost.add(lost)
                        actions = gang.lost(lost)
                if not actions:
                    actions = gang.woke(
                        exits, cancel=running.cancel.is_set(), stop=stop_task in done
                    )
                stop = next((a for a in actions if isinstance(a, StopRanks)), None)
                if stop is not None:
                    # Graceful: the stop returns once every rank exited (or was killed after
                    # the grace), so the pods are free for the next attempt right after.
                    await self._stop_all(
                        running, grace_s=self.resize_grace_s if stop.graceful else None
                    )
                over = next((a for a in actions if isinstance(a, GangOver)), None)
                if over is not None:
                    return over.end
        finally:
            cancel_task.cancel()
            stop_task.cancel()
            for task in asking:
                task.cancel()

    async def _await_exit(
        self, attempt: str, pod: str, rank_exit: asyncio.Future[ExitEvent]
    ) -> None:
        """Ask the rank's agent for the attempt's exit, again and again while it runs: one
        exchange on a kept connection per exit, in place of an event the agent would push
        through the API. When the agent stops answering, the polls of `_wait_exit` (which
        also judge a lost pod) take over; the agent keeps the exit until the reset either way,
        so an answer lost on the way is found by the next question."""
        agent = self.pods.agent(pod)
        failures = 0
        while not rank_exit.done():
            try:
                status = await agent.wait_status(attempt, self.exit_wait_s)
            except (FirepoolError, OSError):
                failures += 1
                if failures >= 2:
                    return
                await asyncio.sleep(self.exit_poll_s / 4)
                continue
            failures = 0
            if status.exit is not None and not rank_exit.done():
                rank_exit.set_result(status.exit)

    async def _poll_exits(
        self,
        job: JobRecord,
        pending: dict[str, asyncio.Future[ExitEvent]],
        silent: dict[str, tuple[int, float]],
    ) -> str | None:
        """The fallback when an exit event was lost: ask the agents. Returns a pod whose agent
        is lost: it has not answered `lost_after_polls` polls in a row and either its process
        is gone or it has been silent long enough to have fenced its attempt itself
        (`fenced_within_s` of its silence bound): a partitioned agent's attempt is never run
        elsewhere while it may still complete."""
        for pod, fut in pending.items():
            asked = time.monotonic()  # the agent heard from us no later than this
            try:
                status = await self.pods.agent(pod).status(job.attempt)
            except UnavailableError:
                polls, since = silent.get(pod, (0, asked))
                silent[pod] = (polls + 1, since)
                if polls + 1 >= self.lost_after_polls and await self._lost(job, pod, since):
                    return pod
                continue
            except (FirepoolError, OSError):
                continue
            silent.pop(pod, None)
            if status.exit is not None and not fut.done():
                fut.set_result(status.exit)
        return None

    async def _lost(self, job: JobRecord, pod: str, silent_since: float) -> bool:
        record = await self.pods.backend.get(pod)
        if record is None or not record.alive:
            return True  # nothing of the agent runs: no fence to wait for
        bound = self.silence_s(job.spec.pool)
        return bound is None or time.monotonic() - silent_since >= fenced_within_s(bound)

    async def _stop_all(
        self, running: Running, *, grace_s: float | None = None, kill: bool = False
    ) -> None:
        grace = self.stop_grace_s if grace_s is None else grace_s

        async def stop(pod: str) -> None:
            with contextlib.suppress(FirepoolError, OSError):
                await self.pods.agent(pod).stop(running.job.attempt, grace_s=grace, kill=kill)

        pods = [p.name for p in running.lease.pods if p.name not in running.lost]
        await asyncio.gather(*(stop(pod) for pod in pods))

    async def kill(self, running: Running) -> None:
        """Fault injection: SIGKILL every rank at once (the attempt then ends as KILLED)."""
        if running.launched:
            await self._stop_all(running, kill=True)

    async def reset(
        self,
        lease: Lease,
        *,
        job: JobRecord | None = None,
        lost: Collection[str] = (),
        acks: Mapping[str, LogAck] | None = None,
    ) -> list[str]:
        """Verified reset of every pod; any pod not confirmed clean is returned as unclean.
        With `job` (the attempt's), each agent keeps the attempt's output until it is
        acknowledged: by `acks` (what was stored from the exit events) with the reset itself,
        or else by the pump (waited for at most `log_drain_s`); output it removed
        unacknowledged is recorded in that rank's log: a loss is never silent. Pods in `lost`
        (their agents stopped answering) are not waited on: they are unclean."""
        ranks = {p.name: rank for rank, p in enumerate(lease.pods)}
        # Only a pump that acknowledges (a rank-aware store) is worth waiting for.
        pumped = acks is None and job is not None and isinstance(self.logs, RankLogSink)
        wait = self.log_drain_s if pumped else 0.0

        async def reset(pod: str) -> str | None:
            if pod in lost:
                if job is not None and isinstance(self.logs, RankLogSink):
                    await asyncio.to_thread(
                        self.logs.note,
                        job.id,
                        job.retries,
                        ranks[pod],
                        f"output may be incomplete: pod {pod} stopped answering",
                    )
                return pod
            try:
                ack = acks.get(pod) if acks is not None else None
                result = await self.pods.agent(pod).reset(await_logs_s=wait, logs=ack)
            except (FirepoolError, OSError, KeyError) as exc:
                log.warning("reset of %s failed: %r", pod, exc)
                return pod
            if job is not None and result.logs_unacked:
                await self.record_loss(job, ranks[pod], result.logs_unacked)
            if not result.clean:
                log.warning("pod %s reset unclean: %s", pod, result.reason)
                return pod
            return None

        results = await asyncio.gather(*(reset(p.name) for p in lease.pods))
        return [pod for pod in results if pod is not None]

    async def record(
        self, job: JobRecord, verdict: Verdict, refused: Callable[[JobRecord, Verdict], Verdict]
    ) -> JobRecord:
        """Write the verdict; returns the job as the store holds it afterwards. While the
        store is unavailable the verdict is kept here and written once it is back. When the
        row changed under the write and still holds this attempt, `refused` (the core's
        `verdict_refused`) says what to write instead, given the row as it is now."""
        for _ in range(5):
            try:
                return await until_stored(
                    functools.partial(self._write, job, verdict),
                    what=f"the verdict of {job.attempt}",
                )
            except LostRaceError:
                # A cancel request bumps the row's version while the attempt runs (or an
                # earlier try committed before its connection broke): re-read, and write again
                # only if the row is still this attempt's.
                fresh = await until_stored(
                    functools.partial(asyncio.to_thread, self.store.get, job.id),
                    what=f"job {job.id}",
                )
                if fresh is None or fresh.state is not JobState.RUNNING:
                    return fresh or job
                if fresh.retries != job.retries:
                    return fresh
                job = fresh
                verdict = refused(fresh, verdict)
        raise LostRaceError(f"job {job.id}: could not record its verdict", field="version")

    async def _write(self, job: JobRecord, verdict: Verdict) -> JobRecord:
        if self._async is not None and not verdict.retry:
            return await self._async.finish_async(
                job,
                verdict.state,
                now=self.clock(),
                exit_code=verdict.exit_code,
                error_class=verdict.error_class,
                message=verdict.message,
            )
        return await asyncio.to_thread(self._write_verdict, job, verdict)

    def _write_verdict(self, job: JobRecord, verdict: Verdict) -> JobRecord:
        now = self.clock()
        if verdict.retry:
            return self.store.requeue(job, now=now, error_class=verdict.error_class)
        return self.store.finish(
            job,
            verdict.state,
            now=now,
            exit_code=verdict.exit_code,
            error_class=verdict.error_class,
            message=verdict.message,
        )

    async def record_loss(self, job: JobRecord, rank: int, unacked: dict[str, int]) -> None:
        """Note in the rank's log the output its pod's reset removed unacknowledged."""
        lost = ", ".join(f"{n} bytes of {s}" for s, n in sorted(unacked.items()))
        log.warning("attempt %s rank %d: output lost at reset: %s", job.attempt, rank, lost)
        if isinstance(self.logs, RankLogSink):
            await asyncio.to_thread(
                self.logs.note,
                job.id,
                job.retries,
                rank,
                f"output incomplete: the pod was reset before {lost} were stored",
            )

    async def _pump_ranks(self, job: JobRecord, pods: list[str], sink: RankLogSink) -> None:
        """Every rank's stdout and stderr, each from the offset the store has (so a pump
        re-started after a broker restart neither loses nor repeats a byte); once a rank's
        streams end (the attempt exited), the agent is told what was stored."""

        async def pump(rank: int, pod: str, stream: str, offset: int) -> int | None:
            """The stream's stored offset once it ended; None when it could not be read to
            its end. The first try starts where the rank's record said (read once for both
            streams); a retry reads it again."""
            for tries in range(_PUMP_TRIES):
                if tries:
                    offset = (await asyncio.to_thread(sink.offsets, job.id, job.retries, rank)).of(
                        stream
                    )
                try:
                    async for chunk in self.pods.agent(pod).logs(
                        job.attempt, stream, offset=offset, follow=True
                    ):
                        offset = await asyncio.to_thread(
                            sink.append_stream, job.id, job.retries, rank, stream, offset, chunk
                        )
                    return offset
                except NotFoundError:
                    return None  # the attempt is gone from the pod (reset)
                except (FirepoolError, OSError, KeyError) as exc:
                    log.info("log stream %s of %s rank %d broke: %r", stream, job.attempt,
                             rank, exc)
                    await asyncio.sleep(_PUMP_BACKOFF_S * (tries + 1))
            return None

        async def rank_pump(rank: int, pod: str) -> None:
            start = await asyncio.to_thread(sink.offsets, job.id, job.retries, rank)
            stdout, stderr = await asyncio.gather(
                *(pump(rank, pod, s, start.of(s)) for s in STREAMS)
            )
            if stdout is None or stderr is None:
                return
            with contextlib.suppress(FirepoolError, OSError, KeyError):
                await self.pods.agent(pod).ack_logs(
                    job.attempt, LogAck(stdout=stdout, stderr=stderr)
                )

        await asyncio.gather(*(rank_pump(rank, pod) for rank, pod in enumerate(pods)))

    async def _pump_logs(self, job: JobRecord, pod: str) -> None:
        """Copy rank 0's output into the attempt's log file while it runs."""

        async def pump(stream: str) -> None:
            try:
                async for chunk in self.pods.agent(pod).logs(
                    job.attempt,
                    stream,
                    follow=True,
                ):
                    await asyncio.to_thread(self.logs.append, job.id, job.retries, chunk)
            except (FirepoolError, OSError, KeyError) as exc:
                log.info("log stream %s of %s ended: %r", stream, job.attempt, exc)

        await asyncio.gather(pump("stdout"), pump("stderr"))


#: A broken log stream is followed again this many times (the agent restarting its listener,
#: a dropped connection) before the pump gives up; the reset then records what was lost.
_PUMP_TRIES = 5
_PUMP_BACKOFF_S = 0.2


def _inline_outputs(running: Running) -> dict[str, InlineOutput] | None:
    """Every rank's output from its exit event, or None when any rank's did not carry it
    (too large, still streaming, or no exit: a lost pod)."""
    outputs: dict[str, InlineOutput] = {}  # in rank order
    for pod in running.lease.pods:
        fut = running.exits.get(pod.name)
        if fut is None or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        output = fut.result().output
        if output is None:
            return None
        outputs[pod.name] = output
    return outputs


def _store_inline(
    sink: RankLogSink, job: JobRecord, outputs: dict[str, InlineOutput]
) -> dict[str, LogAck]:
    """Store each rank's inline output (from byte 0: a byte already stored is skipped) and
    say what to acknowledge; a rank whose output could not be stored is not acknowledged,
    so its reset reports the loss."""
    acks: dict[str, LogAck] = {}
    for rank, (pod, output) in enumerate(outputs.items()):
        try:
            stored = {
                stream: sink.append_stream(job.id, job.retries, rank, stream, 0, data)
                if (data := output.of(stream))
                else 0
                for stream in STREAMS
            }
        except OSError as exc:
            log.warning("output of %s rank %d not stored: %r", job.attempt, rank, exc)
            continue
        acks[pod] = LogAck(stdout=stored["stdout"], stderr=stored["stderr"])
    return acks


def _our_start(found: JobRecord, job: JobRecord, bindings: list[PodBinding]) -> bool:
    """Whether the stored row is exactly the start `job` was trying to commit."""
    return (
        found.state is JobState.RUNNING
        and found.version == job.version + 1
        and found.retries == job.retries
        and [(p.rank, p.pod) for p in found.pods] == [(b.rank, b.pod) for b in bindings]
    )


def _rank_exit(event: ExitEvent) -> RankExit:
    return RankExit(
        event.exit_code,
        event.signal,
        event.oom,
        timed_out=event.stop_reason is StopReason.TIMEOUT,
        pod_ended=event.stop_reason is StopReason.SHUTDOWN,
    )


async def _first(*aws: Coroutine[Any, Any, object]) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()

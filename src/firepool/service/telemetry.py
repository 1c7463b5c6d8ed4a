"""The broker's Prometheus counters and histograms, and its pools' figures for scrape time.

Why here and not in `api/metrics.py`: the service executes the core's actions, so it is where
an acquisition, a commit, a reset or a verdict is known to have happened; the API must not
import drivers, so the broker hands these metric objects to the app through a hook
(`ReadModels.metric_collectors`) and the app registers them in its own registry. Each broker
has its own objects (never the process-global registry), so several brokers in one process (the
tests) never collide.

Labels are bounded: pool names, acquisition paths, states, error classes, retire reasons and
policy names come from the catalog or from enums, never from job ids or caller-chosen names
(queue names and lease tags are the caller's, so the queue depth is per pool).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

from prometheus_client import Counter, Histogram
from prometheus_client.registry import Collector

from firepool.control.records import Lease, Pod, RetireReason
from firepool.model import ErrorCode, JobErrorClass, JobState, PoolSpec, TimelinePoint
from firepool.service.attempt import Running

#: Seconds from a job's submission to its first instruction: warm starts take milliseconds,
#: new pods seconds (here) to tens of seconds (a cluster), a congested queue minutes.
START_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
RUN_BUCKETS = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
#: Control-plane decisions (a dispatch pass, a round) and store commits.
FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1)


class BrokerTelemetry:
    """Counters and histograms the service increments where it executes the core's actions."""

    def __init__(self) -> None:
        self.timeline = Timeline()
        self.acquisitions = Counter(
            "firepool_pod_acquisitions",
            "Pods handed to jobs, by how each was obtained.",
            ["pool", "path"],
            registry=None,
        )
        self.start_latency = Histogram(
            "firepool_job_start_latency_seconds",
            "Submission to first instruction, by rank 0's acquisition path.",
            ["pool", "path"],
            buckets=START_BUCKETS,
            registry=None,
        )
        self.run_time = Histogram(
            "firepool_job_run_seconds",
            "First instruction to the attempt's end.",
            ["pool"],
            buckets=RUN_BUCKETS,
            registry=None,
        )
        self.finished = Counter(
            "firepool_jobs_finished",
            "Jobs that reached a terminal state, by state and error class ('' for none).",
            ["pool", "state", "error_class"],
            registry=None,
        )
        self.dispatch = Histogram(
            "firepool_dispatch_decision_seconds",
            "The broker core's dispatch pass (claims for the whole queue).",
            buckets=FAST_BUCKETS,
            registry=None,
        )
        self.commit = Histogram(
            "firepool_dispatch_commit_seconds",
            "The durable QUEUED -> RUNNING commit of one attempt.",
            buckets=FAST_BUCKETS,
            registry=None,
        )
        self.scaler = Counter(
            "firepool_pod_actions",
            "Pods created (reason: role) by the scaler, or deleted (reason: why it retired: "
            "scale_down, hold_expired, session_boundary, unclean_reset, ...).",
            ["pool", "action", "reason"],
            registry=None,
        )
        self.round = Histogram(
            "firepool_round_decision_seconds",
            "An elastic round's allocation decision, by round policy.",
            ["policy"],
            buckets=FAST_BUCKETS,
            registry=None,
        )
        self.resets = Counter(
            "firepool_pod_resets",
            "Verified resets between jobs, by outcome (an unclean pod is deleted).",
            ["pool", "outcome"],
            registry=None,
        )
        self.start_failures = Counter(
            "firepool_pod_start_failures",
            "Pods that never became ready, by the typed error their backend gave (code: an "
            "ErrorCode such as ConfigError for an image that cannot be pulled; the exception's "
            "class in `kind`). Their budget is released as they are deleted.",
            ["pool", "code", "kind"],
            registry=None,
        )
        self.recovery = Counter(
            "firepool_recovery_events",
            "What a broker restart did: pods restored, reset and held, or deleted; attempts "
            "re-attached or lost.",
            ["event"],
            registry=None,
        )

    def collectors(self) -> list[Collector]:
        return [
            self.acquisitions,
            self.start_latency,
            self.run_time,
            self.finished,
            self.dispatch,
            self.commit,
            self.scaler,
            self.round,
            self.resets,
            self.start_failures,
            self.recovery,
        ]

    # One call per event, so each call site in the broker stays a single line.

    def leased(self, lease: Lease) -> None:
        for pod in lease.pods:
            self.acquisitions.labels(lease.pool, pod.path.value).inc()

    def attempt_ended(self, running: Running, end: float, unclean: int) -> None:
        """An attempt's pods are reset: its start latency and run time (when it started) and
        the resets' outcomes."""
        lease = running.lease
        pool, first = lease.pool, running.first_instruction
        if first is not None:
            latency = max(first - running.ticket.submitted_at, 0.0)
            self.start_latency.labels(pool, lease.pods[0].path.value).observe(latency)
            self.timeline.started(latency)
            self.run_time.labels(pool).observe(max(end - first, 0.0))
        clean = len(lease.pods) - unclean
        if clean > 0:
            self.resets.labels(pool, "clean").inc(clean)
        if unclean > 0:
            self.resets.labels(pool, "unclean").inc(unclean)

    def deleted(self, pod: Pod | None, reason: RetireReason) -> None:
        if pod is not None:
            self.scaler.labels(pod.pool, "delete", reason.value).inc()

    def pod_start_failed(self, pool: str, error: BaseException) -> None:
        code = getattr(error, "code", None)
        self.start_failures.labels(
            pool, code.value if isinstance(code, ErrorCode) else "Internal", type(error).__name__
        ).inc()

    def job_finished(self, pool: str, state: JobState, error: JobErrorClass | None) -> None:
        if state.terminal:
            self.finished.labels(pool, state.value, error.value if error else "").inc()


class Timeline:
    """The dashboard's plots over time: held vs busy pods and start latency percentiles.

    The broker samples it every `BrokerConfig.timeline_s` (a bounded ring: `keep` samples, an
    hour at 10 s), so a page load reads at most `keep` points whatever the store holds. Start
    latencies arrive as attempts end and are summarised per sample, so the percentiles are of
    the jobs of that interval, not of the whole run.
    """

    #: Latencies kept between two samples at most (a burst beyond it is summarised by these).
    MAX_PENDING = 10_000

    def __init__(self, keep: int = 360) -> None:
        self.points: collections.deque[TimelinePoint] = collections.deque(maxlen=keep)
        self._pending: list[float] = []

    def started(self, latency: float) -> None:
        if len(self._pending) < self.MAX_PENDING:
            self._pending.append(latency)

    def sample(self, now: float, held: int, busy: int) -> TimelinePoint:
        ordered = sorted(self._pending)
        self._pending = []

        def rank(q: float) -> float | None:
            if not ordered:
                return None
            return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]

        point = TimelinePoint(now, held, busy, len(ordered), rank(50), rank(90), rank(99))
        self.points.append(point)
        return point


class HeldClock:
    """Running totals of held pod-seconds and GPU-seconds per pool.

    Integrated from the held count each time it is read (every scrape): the exporter's usual
    practice, exact while the count does not change between two scrapes and otherwise off by
    at most the change times the scrape interval. Counting at every pod event instead would
    put an O(pods) count on the job path, which the broker keeps O(1).
    """

    def __init__(self, now: float) -> None:
        self._last: dict[str, float] = {}
        self._start = now
        self.pod_seconds: dict[str, float] = {}
        self.gpu_seconds: dict[str, float] = {}
        self._counts: dict[str, tuple[int, int]] = {}

    def accrue(self, pool: str, now: float, pods: int, gpus: int) -> tuple[float, float]:
        last = self._last.get(pool, self._start)
        held_pods, held_gpus = self._counts.get(pool, (pods, gpus))
        span = max(now - last, 0.0)
        pod_s = self.pod_seconds.get(pool, 0.0) + span * held_pods
        gpu_s = self.gpu_seconds.get(pool, 0.0) + span * held_gpus
        self.pod_seconds[pool], self.gpu_seconds[pool] = pod_s, gpu_s
        self._last[pool] = now
        self._counts[pool] = (pods, gpus)
        return pod_s, gpu_s


def held_counts(spec: PoolSpec, groups: Sequence[str | None]) -> tuple[int, int]:
    """Held pods and GPUs of one pool from its tracked pods' groups: every tracked pod is held
    (starting, idle, held, busy or retiring); a GPU group (an active pod and its standbys)
    counts its GPUs once. Set and list built-ins, not a Python loop: a scrape reads every pod."""
    if not spec.is_gpu:
        return len(groups), 0
    named = set(groups)
    named.discard(None)
    return len(groups), (len(named) + groups.count(None)) * spec.accelerators_per_pod

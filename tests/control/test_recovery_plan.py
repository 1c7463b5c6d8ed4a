"""Restart recovery as a pure plan: the annotation codec and the paper's recovery order."""

from __future__ import annotations

from firepool.control import pod_annotations
from firepool.control.actions import DeletePod, Dispatch, RecordVerdict, StartAttempt
from firepool.control.admission import CreateOrder
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore
from firepool.control.records import PodSnapshot, Retired, RetireReason, Ticket
from firepool.control.recovery import (
    Binding,
    EndedJob,
    ListedPod,
    RunningJob,
    busy_jobs,
    plan_recovery,
)
from firepool.control.tracker import Tracker
from firepool.model import (
    AcquisitionPath,
    ElasticSpec,
    JobErrorClass,
    JobKind,
    JobSpec,
    JobState,
    PodRole,
    PodState,
)
from firepool.testing.control import cpu_pool, gpu_pool

CPU = cpu_pool(idle_timeout=100)
GPU = gpu_pool(standbys_per_active=1)
SPECS = {"cpu": CPU, "gpu": GPU}


def snap(name: str, gpu: bool = False, **annotations: str) -> PodSnapshot | None:
    return pod_annotations.decode(
        name, "gpu" if gpu else "cpu", created_at=1.0, role=PodRole.ACTIVE, template=1,
        annotations=annotations, gpu=gpu,
    )  # fmt: skip


def listed(
    name: str,
    pool: str = "cpu",
    role: PodRole = PodRole.ACTIVE,
    alive: bool = True,
    **annotations: str,
) -> ListedPod:
    return ListedPod(name, pool, role, 1.0, 1, annotations, alive)


def running_job(job: str, *pods: str, retries: int = 0, max_retries: int = 0) -> RunningJob:
    spec = JobSpec(pool="cpu", command=["x"], max_retries=max_retries)
    return RunningJob(
        Ticket(job, "alice", spec, 0.0, retries),
        tuple(Binding(p, AcquisitionPath.WARM, "same_session") for p in pods),
    )


def test_a_recycled_pod_still_retires_after_its_job_across_a_restart() -> None:
    restored = snap(
        "p", state="running", job="j", owner="alice", queue="default", tag="b", used="1",
        retire_after="session_boundary",
    )  # fmt: skip
    assert restored is not None and restored.retire_after is RetireReason.SESSION_BOUNDARY
    tracker = Tracker([CPU])
    tracker.restore(restored)
    assert tracker.release("j", 5.0).retired == [Retired("p", RetireReason.SESSION_BOUNDARY)]


def test_holds_are_restored_and_unready_pods_are_not_trusted() -> None:
    held = snap("h", state="held", owner="alice", queue="q", tag="t", used="1", hold_until="50.0")
    assert held is not None
    assert (held.state, held.owner, held.hold_until, held.job) == (
        PodState.HELD, "alice", 50.0, None,
    )  # fmt: skip
    assert snap("s", state="starting") is None
    assert snap("x") is None
    assert snap("bad", state="held", hold_until="soon") is None
    gpu = snap("g", gpu=True, state="idle")
    assert gpu is not None and gpu.group == "g"


def test_the_codec_round_trips_what_the_broker_writes() -> None:
    order = CreateOrder(
        "p",
        "gpu",
        PodRole.ACTIVE,
        "grp",
        "grp",
        single_use=False,
        image="reg/img@sha256:" + "a" * 64,
    )
    ann = pod_annotations.starting(order)
    ticket = Ticket("j", "bob", JobSpec(pool="gpu", command=["x"], queue="q", lease_tag="t"), 0)
    for changes in (pod_annotations.running(ticket, RetireReason.SESSION_BOUNDARY),):
        ann.update({k: v for k, v in changes.items() if v is not None})
    decoded = snap("p", gpu=True, **ann)
    assert decoded is not None
    assert (decoded.state, decoded.job, decoded.owner, decoded.queue, decoded.tag) == (
        PodState.RUNNING, "j", "bob", "q", "t",
    )  # fmt: skip
    assert decoded.group == "grp" and decoded.image == order.image  # custom images come back
    assert decoded.retire_after is RetireReason.SESSION_BOUNDARY
    ann.update({k: v for k, v in pod_annotations.held(42.5).items() if v is not None})
    ann.pop("job")
    held = snap("p", gpu=True, **ann)
    assert held is not None and (held.state, held.hold_until, held.job) == (
        PodState.HELD,
        42.5,
        None,
    )


def test_the_plan_restores_trusted_pods_and_deletes_the_rest() -> None:
    pods = [
        listed("idle", state="idle"),
        listed("dead", alive=False, state="idle"),
        listed("other-pool", pool="nowhere", state="idle"),
        listed("never-ready", state="starting"),
        listed("busy", state="running", job="j1", owner="alice", used="1"),
        listed("orphan", state="running", job="gone", owner="alice", used="1"),
    ]
    plan = plan_recovery(pods, [running_job("j1", "busy")], SPECS)
    assert [s.name for s in plan.restore] == ["busy", "idle"]
    assert sorted(plan.delete) == ["dead", "never-ready", "orphan", "other-pool"]
    assert [j.ticket.job for j in plan.probe] == ["j1"] and plan.lost == []


def test_standbys_follow_their_active_pod_or_go() -> None:
    pods = [
        listed("sb", pool="gpu", role=PodRole.STANDBY, state="idle", group="a"),
        listed("a", pool="gpu", state="idle", group="a"),
        listed("lonely", pool="gpu", role=PodRole.STANDBY, state="idle", group="b"),
    ]
    plan = plan_recovery(pods, [], SPECS)
    assert [s.name for s in plan.restore] == ["a", "sb"]  # the active pod first
    assert plan.delete == ["lonely"]


def test_a_job_whose_pods_are_gone_is_lost() -> None:
    pods = [listed("p1", state="running", job="j", owner="alice", used="1")]
    plan = plan_recovery(pods, [running_job("j", "p1", "gone"), running_job("k", "vanished")],
                         SPECS)  # fmt: skip
    assert sorted(j.ticket.job for j in plan.lost) == ["j", "k"] and plan.probe == []
    assert [s.state for s in plan.restore] == [PodState.RUNNING]  # released unclean, later


def test_a_pod_whose_annotations_lag_its_job_is_restored_busy_with_it() -> None:
    """The broker died after the job's durable commit (or its release) and before the pods'
    annotations said so: the store's bindings win. Each pod is probed with the job, never
    handed to another job while the attempt may still run (or have ended) there."""
    pods = [
        listed("p1", state="running", job="j", owner="alice", used="1"),
        listed("p2", state="idle"),
        listed("p3", state="held", owner="alice", used="1", hold_until="99.0"),
    ]
    plan = plan_recovery(pods, [running_job("j", "p1", "p2", "p3")], SPECS)
    assert [j.ticket.job for j in plan.probe] == ["j"] and plan.lost == []
    assert {(s.name, s.state, s.job, s.owner) for s in plan.restore} == {
        (name, PodState.RUNNING, "j", "alice") for name in ("p1", "p2", "p3")
    }
    assert all(s.hold_until == 0.0 for s in plan.restore)


def test_a_lost_attempt_is_judged_like_any_lost_pod_and_respects_max_retries() -> None:
    core = BrokerCore([CPU], BudgetLedger(), new_name=lambda pool: "x", config=None)
    core.restore_pod(
        PodSnapshot("p1", "cpu", PodState.RUNNING, 1.0, owner="alice", job="j", used=True)
    )
    last = running_job("j", "p1", retries=1, max_retries=1)
    actions = core.recovery_lost(last.ticket, 10.0)
    verdicts = [a.verdict for a in actions if isinstance(a, RecordVerdict)]
    assert [(v.state, v.error_class) for v in verdicts] == [
        (JobState.FAILED, JobErrorClass.POD_LOST)
    ]
    assert not any(isinstance(a, DeletePod) for a in actions)  # held until it is stored:
    later = core.verdict_recorded(last.ticket, JobState.FAILED, 11.0)
    assert later[0] == DeletePod("p1", RetireReason.UNCLEAN_RESET)  # released unclean
    retry = running_job("k", retries=0, max_retries=2)
    (record,) = core.recovery_lost(retry.ticket, 10.0)
    assert isinstance(record, RecordVerdict) and record.verdict.state is JobState.QUEUED


def lost_in_a_restart(ticket: Ticket, core: BrokerCore | None = None) -> tuple[JobState, object]:
    core = core or BrokerCore([CPU], BudgetLedger(), new_name=lambda pool: "x", config=None)
    (record,) = core.recovery_lost(ticket, 10.0)
    assert isinstance(record, RecordVerdict)
    return record.verdict.state, record.verdict.error_class


def test_a_reclaim_before_the_restart_does_not_use_up_a_retry() -> None:
    """One attempt reclaimed by the capacity's owner (no fault of the job's), the next lost in
    a restart: one failure of one allowed retry, so the job is queued again, as it is when the
    same attempt fails with the broker up. It used to count the reclaim too and fail."""
    spec = JobSpec(pool="cpu", command=["x"], max_retries=1)
    reclaimed = Ticket("j", "alice", spec, 0.0, retries=1, reclaims=1)
    assert lost_in_a_restart(reclaimed) == (JobState.QUEUED, JobErrorClass.POD_LOST)
    failed_once = Ticket("j", "alice", spec, 0.0, retries=1, reclaims=0)
    assert lost_in_a_restart(failed_once) == (JobState.FAILED, JobErrorClass.POD_LOST)


def test_an_elastic_job_resized_before_the_restart_is_judged_by_its_own_rule() -> None:
    """An elastic job's resizes are new attempts (`retries`) but no failures. Lost in a
    restart after two resizes with one retry allowed, it goes back to the rounds; the plain
    task rule used to count the resizes and fail it."""
    pool = cpu_pool(max_count=4)
    core = BrokerCore([pool], BudgetLedger(), new_name=lambda _pool: "x")
    assert core.elastic is not None  # the default config runs the round policy
    spec = JobSpec(
        pool="cpu",
        command=["x"],
        max_retries=1,
        kind=JobKind.ELASTIC,
        elastic=ElasticSpec(app="cifar10", min_pods=1, max_pods=2),
    )
    resized = Ticket("e", "alice", spec, 0.0, retries=2)
    assert lost_in_a_restart(resized, core) == (JobState.QUEUED, JobErrorClass.POD_LOST)


def test_standbys_are_not_promoted_until_the_sweep_has_verified_their_gpu() -> None:
    """After a restart the per-GPU gate fails closed (the broker paper's appendix A.4): a
    restored standby serves a job only once a sweep found its card exclusive to its group."""
    core = BrokerCore([GPU], BudgetLedger(), new_name=lambda pool: "x", config=None)
    core.restore_pod(PodSnapshot("a", "gpu", PodState.RUNNING, 1.0, group="a", owner="alice",
                                 job="j", used=True))  # fmt: skip
    core.restore_pod(PodSnapshot("sb", "gpu", PodState.IDLE, 1.0, role=PodRole.STANDBY,
                                 group="a"))  # fmt: skip
    ticket = Ticket("k", "bob", JobSpec(pool="gpu", command=["x"]), 5.0)
    core.submit(ticket, 5.0)
    assert not [a for a in core.dispatch(6.0) if isinstance(a, StartAttempt)]
    assert core.exclusivity_verified(["a"], 7.0) == [Dispatch()]
    (start,) = [a for a in core.dispatch(8.0) if isinstance(a, StartAttempt)]
    assert [p.name for p in start.lease.pods] == ["sb"]


def test_scale_down_clocks_are_rebuilt_from_pod_creation_times() -> None:
    """A restored idle pod is as idle as it is old: one created past the keep-alive retires
    on the first pass, a young one stays for the rest of its keep-alive."""
    core = BrokerCore([CPU], BudgetLedger(), new_name=lambda pool: "x", config=None)
    for name, created in (("old", 0.0), ("young", 950.0)):
        core.restore_pod(PodSnapshot(name, "cpu", PodState.IDLE, created))
    retired = {a.pod for a in core.reconcile("cpu", 1000.0) if isinstance(a, DeletePod)}
    assert retired == {"old"}
    later = {a.pod for a in core.reconcile("cpu", 1051.0) if isinstance(a, DeletePod)}
    assert later == {"young"}


def ended_job(job: str, *pods: str, finished: float = 50.0) -> EndedJob:
    spec = JobSpec(pool="cpu", command=["x"], queue="q", lease_tag="s")
    return EndedJob(Ticket(job, "alice", spec, 0.0), pods, finished)


def test_a_pod_of_an_ended_jobs_last_attempt_is_reset_then_held_from_the_jobs_end() -> None:
    """The verdict went out before the reset and the broker died before the release: the pod
    is still marked busy with a job the store holds as ended. It is reset again and held for
    the job's session as the release would have held it; any other such pod is deleted."""
    busy = {"state": "running", "owner": "alice", "used": "1", "queue": "q", "tag": "s"}
    pods = [
        listed("mine", job="done", **busy),
        listed("rank1", job="done", **busy),
        listed("older", job="done", **busy),  # not among the last attempt's bindings
        listed("recycled", job="done", retire_after="session_boundary", **busy),
        listed("theirs", job="done", **{**busy, "owner": "bob"}),
        listed("unknown", job="vanished", **busy),
    ]
    assert busy_jobs(pods) == {"done", "vanished"}
    ended = {"done": ended_job("done", "mine", "rank1", "recycled", "theirs")}
    plan = plan_recovery(pods, [], SPECS, ended)
    assert [(r.held.name, r.rank) for r in plan.reset] == [("mine", 0), ("rank1", 1)]
    held = plan.reset[0].held
    assert (held.state, held.job, held.owner, held.queue, held.tag) == (
        PodState.HELD, None, "alice", "q", "s",
    )  # fmt: skip
    assert held.hold_until == 50.0 + CPU.hold_seconds and held.used
    assert sorted(plan.delete) == ["older", "recycled", "theirs", "unknown"]
    assert plan.restore == []


def test_a_pool_without_holds_deletes_the_ended_jobs_pod() -> None:
    busy = {"state": "running", "owner": "alice", "used": "1", "queue": "q", "tag": "s"}
    specs = {**SPECS, "cpu": cpu_pool(idle_timeout=100, caller_hold_seconds=0)}
    plan = plan_recovery([listed("p", job="done", **busy)], [], specs,
                         {"done": ended_job("done", "p")})  # fmt: skip
    assert plan.reset == [] and plan.delete == ["p"]

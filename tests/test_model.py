"""Shared value types: invalid pool specs and job specs fail with typed errors naming the field."""

from __future__ import annotations

import pydantic
import pytest

from firepool.model import (
    JOB_TRANSITIONS,
    ConfigError,
    ErrorCode,
    JobErrorClass,
    JobSpec,
    JobState,
    PoolSpec,
    RequestValidationError,
    attempt_id,
    forbidden_env_reason,
    parse_attempt_id,
    parse_job_error_class,
)


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        ({"min_count": 5, "max_count": 2}, "min_count"),
        ({"min_count": -1}, "min_count"),
        ({"max_idle_count": -1}, "max_idle_count"),
        ({"idle_timeout": -5}, "idle_timeout"),
        ({"idle_timeout": float("nan")}, "idle_timeout"),
        ({"caller_hold_seconds": -1}, "caller_hold_seconds"),
        ({"step": 0}, "step"),
        ({"accelerator": "X9000", "accelerators_per_pod": 1}, "accelerator"),
        ({"standbys_per_active": 3}, "standbys_per_active"),
        ({"accelerators_per_pod": 1}, "accelerators_per_pod"),
        ({"accelerator": "H200", "accelerators_per_pod": 0}, "accelerators_per_pod"),
        ({"max_gpus_per_caller": 2}, "max_gpus_per_caller"),
        ({"max_pods_per_caller": 0}, "max_pods_per_caller"),
        ({"min_cout": 1}, "min_cout"),
        ({"max_count": "many"}, "max_count"),
    ],
)
def test_invalid_pool_specs_name_the_field(knobs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        PoolSpec(name="p", **knobs)  # type: ignore[arg-type]
    assert err.value.field == field
    assert err.value.to_dict()["error"] == "ConfigError"


def test_pool_spec_derived_values() -> None:
    gpu = PoolSpec(name="h200", accelerator="H200", accelerators_per_pod=8, idle_timeout=90)
    assert (gpu.hold_seconds, gpu.budget_resource, gpu.units_per_pod) == (90, "H200", 8)
    cpu = PoolSpec(name="cpu", cpus_per_pod=2.5, caller_hold_seconds=5)
    assert (cpu.hold_seconds, cpu.budget_resource, cpu.units_per_pod) == (5, "cpu", 3)


def test_job_spec_rejects_unknown_fields_and_forbidden_env() -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        JobSpec(pool="cpu", command=["python"], lease_tg="x")  # type: ignore[call-arg]
    assert err.value.errors()[0]["loc"] == ("lease_tg",)
    for name in (
        "LD_PRELOAD",
        "PYTHONPATH",
        "CUDA_DEVICE_MEMORY_LIMIT_0",
        "FIREPOOL_TOKEN",
        "MASTER_ADDR",
        "RANK",
        "bad-name",
    ):
        with pytest.raises(pydantic.ValidationError) as err:
            JobSpec(pool="cpu", command=["python"], env={name: "1"})
        assert err.value.errors()[0]["type"] == "forbidden_env"
        assert name in err.value.errors()[0]["msg"]
    assert forbidden_env_reason("MY_SETTING") is None


def test_job_transitions_never_leave_a_terminal_state() -> None:
    for state in JobState:
        assert (not JOB_TRANSITIONS[state]) == state.terminal


def test_attempt_ids_round_trip_and_reject_garbage() -> None:
    assert parse_attempt_id(attempt_id("job:with:colons", 3)) == ("job:with:colons", 3)
    for bad in ("nojob", "job:", ":1", "job:x"):
        with pytest.raises(RequestValidationError):
            parse_attempt_id(bad)


def test_a_jobs_end_class_is_apart_from_the_codes_of_refused_requests() -> None:
    """Only the refusals that can end an accepted job share their string with an end class; no
    request code such as `NotFound` or `Forbidden` can be a job's end."""
    shared = {c.value for c in JobErrorClass} & {c.value for c in ErrorCode}
    assert shared == {
        "LaunchFailed",
        "DependencyInstallFailed",
        "Unschedulable",
        "UnknownPool",
        "InternalError",
    }
    assert JobErrorClass("Timeout") is JobErrorClass.TIMEOUT
    with pytest.raises(ValueError):
        JobErrorClass("NotFound")


def test_a_stored_end_class_a_newer_broker_wrote_still_reads() -> None:
    assert parse_job_error_class(None) is None
    assert parse_job_error_class("Reclaimed") is JobErrorClass.RECLAIMED
    assert parse_job_error_class("SomethingNewer") is JobErrorClass.INTERNAL

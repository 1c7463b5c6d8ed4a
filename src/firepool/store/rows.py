"""Database rows to records. Kept apart from the SQL so that reading stays forgiving: a row
written by an older or newer broker still loads, even if today's rules would refuse it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from firepool.model import AcquisitionPath, JobSpec, JobState, parse_job_error_class
from firepool.store.records import JobRecord, PodBinding


def spec_from_json(text: str) -> JobSpec:
    try:
        return JobSpec.model_validate_json(text)
    except ValidationError:
        # Stored specs were valid when accepted; a later, stricter rule (a newly forbidden
        # environment name, say) must not make an existing job unreadable.
        return JobSpec.model_construct(**json.loads(text))


def binding_from_row(row: Any) -> PodBinding:
    return PodBinding(
        rank=row.rank,
        pod=row.pod,
        acquisition=AcquisitionPath(row.acquisition),
        reason=row.reason,
        pool=row.pool,
    )


def job_from_row(row: Any, pods: Iterable[PodBinding]) -> JobRecord:
    return JobRecord(
        id=row.id,
        caller=row.caller,
        spec=spec_from_json(row.spec),
        state=JobState(row.state),
        version=row.version,
        retries=row.retries,
        exit_code=row.exit_code,
        error_class=parse_job_error_class(row.error_class),
        message=row.message,
        cancel_requested=bool(row.cancel_requested),
        timings={
            "submitted": row.submitted_at,
            "assigned": row.assigned_at,
            "started": row.started_at,
            "first_instruction": row.first_instruction_at,
            "finished": row.finished_at,
        },
        pods=tuple(pods),
        reclaims=row.reclaims,
    )

"""Response shapes the SDK needs that the API package does not publish yet.

Every other answer parses into the API's own models (`firepool.api.schemas`). `GET /v1/pods`
comes with the service; until its schema lands in `api/schemas.py` this mirrors the agreed
shape. Unlike the API's closed models these ignore unknown fields, so a field the service
adds does not break an older SDK.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PodInfo(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    pool: str
    role: str
    state: str
    owner: str | None = None
    queue: str | None = None
    lease_tag: str | None = None
    group: str | None = None
    job: str | None = None
    hold_until: float | None = None
    created_at: float | None = None


class PodListOut(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    pods: list[PodInfo]

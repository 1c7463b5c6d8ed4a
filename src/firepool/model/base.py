"""The one strict pydantic base every value model derives from, and the helper that turns
pydantic's generic error into a field name and message."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """The one pydantic base: unknown fields are errors, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


def _first_loc(err: ValidationError) -> tuple[str | None, str]:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or None
    return loc, first["msg"]

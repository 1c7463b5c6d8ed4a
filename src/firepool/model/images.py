"""Container image references: their syntax, whether one is pinned by digest, its repository."""

from __future__ import annotations

import re

#: An image reference: a repository path, then an optional `:tag` or `@sha256:<digest>`.
_IMAGE_REF = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._/-]*(:[0-9]+/[A-Za-z0-9._/-]+)?"  # registry port, then the path
    r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)
_IMAGE_PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")


def image_reference_problem(ref: str) -> str | None:
    """Why `ref` is not an image reference (`repo[:tag][@sha256:<64 hex>]`), or None."""
    if _IMAGE_REF.match(ref) is None:
        return (
            f"{ref!r} is not an image reference: expected repository[:tag] or "
            "repository@sha256:<64 hex digits>"
        )
    return None


def image_is_pinned(ref: str) -> bool:
    """A reference pinned by digest names one immutable image; a tag may move."""
    return _IMAGE_PINNED.search(ref) is not None


def image_repository(ref: str) -> str:
    """The repository of a reference, without its digest or tag (a registry port stays)."""
    ref = ref.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return ref[:colon] if colon > slash else ref

"""Which custom images a pool admits: the one rule both drivers apply before a job is queued.

The broker paper lets a caller bring its own image only from an allowlist. Each pool lists
entries of two kinds: an exact digest-pinned reference admits that one image, and a repository
prefix admits the repository itself at any tag or digest and every repository below it on a
path boundary (`registry/team` admits `registry/team/trainer:v1`, not `registry/team-x:v1`).
What happens to an admitted image afterwards (a single-use pod for a tag, a reusable pod fenced
by caller, pool, queue, lease tag and digest for a pinned one) is the tracker's claim rule.
"""

from __future__ import annotations

from firepool.model import ImageNotAllowedError, PoolSpec, image_repository


def image_allowed(pool: PoolSpec, image: str) -> bool:
    """Whether `pool`'s allowlist admits `image` (an already well-formed reference)."""
    repository = image_repository(image)
    digest = image.partition("@")[2]
    for entry in pool.allowed_images:
        if "@" in entry:  # one image: its repository and digest (a tag beside them is a label)
            pinned = (image_repository(entry), entry.partition("@")[2])
            if digest and (repository, digest) == pinned:
                return True
            continue
        prefix = entry.rstrip("/")
        if repository == prefix or repository.startswith(prefix + "/"):
            return True
    return False


def check_image(pool: PoolSpec, image: str | None) -> None:
    """Raise a typed `ImageNotAllowed` for a custom image the pool does not admit; a job
    without an image runs on the pool's own and always passes."""
    if image is None or image_allowed(pool, image):
        return
    if pool.allowed_images:
        listed = ", ".join(pool.allowed_images)
        why = f"pool {pool.name!r} admits only {listed}"
    else:
        why = f"pool {pool.name!r} admits no custom images"
    raise ImageNotAllowedError(f"image {image!r} is not allowed: {why}", field="image")

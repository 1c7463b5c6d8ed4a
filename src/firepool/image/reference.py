"""An image name as containerd will store it.

A pod asking for `firepool/base:0.1.0` makes the kubelet look up `docker.io/firepool/base:0.1.0`
(the CRI normalises names the way docker does), so an imported archive must carry the full
form in `io.containerd.image.name`, or the node will try to pull an image it already holds.
OCI's own `org.opencontainers.image.ref.name` is only the tag, as containerd's exporter writes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from firepool.image.errors import ImageError

DEFAULT_DOMAIN = "docker.io"
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?")
_TAG = re.compile(r"[\w][\w.-]{0,127}")


@dataclass(frozen=True)
class Reference:
    domain: str
    path: str
    tag: str

    @property
    def full(self) -> str:
        return f"{self.domain}/{self.path}:{self.tag}"


def parse_reference(name: str) -> Reference:
    """`name` normalised (domain, `library/` for a one-part docker.io name, tag `latest`);
    digests are refused: an archive names what it holds by tag."""
    if "@" in name:
        raise ImageError(f"{name!r}: name the image by tag, not digest", field="name")
    rest, tag = name, "latest"
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        rest, tag = name[:colon], name[colon + 1 :]
    first, _, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, remainder
    else:
        domain, path = DEFAULT_DOMAIN, rest
        if "/" not in path:
            path = f"library/{path}"
    if not _DOMAIN.fullmatch(domain):
        raise ImageError(f"{name!r}: bad registry {domain!r}", field="name")
    if not all(_COMPONENT.fullmatch(part) for part in path.split("/")):
        raise ImageError(
            f"{name!r}: each path component must be lower-case letters, digits and "
            "single separators (. _ __ -)",
            field="name",
        )
    if not _TAG.fullmatch(tag):
        raise ImageError(f"{name!r}: bad tag {tag!r}", field="name")
    return Reference(domain, path, tag)

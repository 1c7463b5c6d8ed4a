"""`firepool image build`: the pool base image as an OCI archive, with no docker or registry.

The image's config (user, environment, working directory, ports, command) comes from
pool-base.Dockerfile's final stage and its file system from `rootfs`, which must account for
every COPY and RUN of that stage: one definition, two builders. The archive is what a node's
containerd imports (`ctr -n k8s.io images import`), so the test cluster's real kubelet node
runs the very agent this checkout holds."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import firepool
from firepool.image.archive import check_output, write_image
from firepool.image.dockerfile import final_stage
from firepool.image.errors import DockerfileError, DockerfileNotFoundError
from firepool.image.reference import parse_reference
from firepool.image.rootfs import REPRODUCES, UID, pool_rootfs

DEFAULT_OUTPUT = Path("build/pool-base.oci.tar")
#: The checkout's root, seen from src/firepool/image/build.py.
CHECKOUT = Path(__file__).resolve().parents[3]
DOCKERFILE = Path("deploy/docker/pool-base.Dockerfile")
#: Beside the Dockerfile, as its build stage COPYs it.
REQUIREMENTS = "agent-requirements.txt"


@dataclass(frozen=True)
class BuiltImage:
    path: Path
    #: As containerd stores it (`docker.io/firepool/base:0.1.0`).
    name: str
    #: The manifest's digest: the image's identity (`ctr images ls` shows it).
    digest: str
    size: int
    seconds: float
    files: int
    distributions: tuple[str, ...]
    libraries: tuple[str, ...]


def default_name() -> str:
    return f"firepool/base:{firepool.__version__}"


def checkout_dockerfile() -> Path:
    """pool-base.Dockerfile of the checkout this firepool runs from; an installed firepool has
    none (it is not package data: docker builds read it from deploy/)."""
    path = CHECKOUT / DOCKERFILE
    if not path.is_file():
        raise DockerfileNotFoundError(
            f"no {DOCKERFILE} under {CHECKOUT}: run from a firepool source checkout, or pass "
            "--dockerfile",
            field="dockerfile",
        )
    return path


def build_pool_image(
    output: Path = DEFAULT_OUTPUT, name: str | None = None, dockerfile: Path | None = None
) -> BuiltImage:
    """The pool image at `output`, named `name` (default `firepool/base:<version>`), defined
    by `dockerfile` (default: the checkout's) and the agent requirements beside it."""
    started = time.monotonic()
    name = name or default_name()
    reference = parse_reference(name)  # a bad name or output fails before any work
    check_output(output)
    dockerfile = dockerfile if dockerfile is not None else checkout_dockerfile()
    stage = final_stage(dockerfile)
    for instruction in stage.filesystem:
        if instruction.text() not in REPRODUCES:
            raise DockerfileError(
                f"{dockerfile}:{instruction.line}: the image builder does not reproduce "
                f"{instruction.text()!r}; teach firepool.image.rootfs what it does",
                field="dockerfile",
            )
    if stage.config.user not in (str(UID), f"{UID}:{UID}"):
        raise DockerfileError(
            f"{dockerfile}: USER {stage.config.user} is not the pod's uid {UID}",
            field="dockerfile",
        )
    contents = pool_rootfs(dockerfile.parent / REQUIREMENTS)
    digest = write_image(contents.tree, stage.config, name, output)
    return BuiltImage(
        path=output,
        name=reference.full,
        digest=digest,
        size=output.stat().st_size,
        seconds=time.monotonic() - started,
        files=len(contents.tree),
        distributions=contents.distributions,
        libraries=contents.libraries,
    )

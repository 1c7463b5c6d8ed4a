"""Images built here, without docker or a registry: the pool base image, and any root file
system as an OCI archive that containerd imports (see docs/kubernetes.md)."""

from __future__ import annotations

from firepool.image.archive import write_image, write_oci_archive
from firepool.image.build import BuiltImage, build_pool_image, default_name
from firepool.image.config import ImageConfig
from firepool.image.errors import (
    DockerfileError,
    DockerfileNotFoundError,
    ImageError,
    ImageOutputError,
    RootfsError,
)

__all__ = [
    "BuiltImage",
    "DockerfileError",
    "DockerfileNotFoundError",
    "ImageConfig",
    "ImageError",
    "ImageOutputError",
    "RootfsError",
    "build_pool_image",
    "default_name",
    "write_image",
    "write_oci_archive",
]

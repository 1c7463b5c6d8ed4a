"""Why an image could not be built, as typed errors: the CLI prints them as one line, and a
caller (the test cluster's set-up) can tell a bad definition from a host that lacks a piece."""

from __future__ import annotations

from firepool.model import ConfigError


class ImageError(ConfigError):
    """Base of the image builder's errors."""


class DockerfileNotFoundError(ImageError):
    """The image's definition is not where the builder looked (not a source checkout)."""


class DockerfileError(ImageError):
    """The Dockerfile says something the builder cannot reproduce faithfully."""


class RootfsError(ImageError):
    """The running environment lacks a piece the image must hold, or two pieces collide."""


class ImageOutputError(ImageError):
    """The archive cannot be written where it was asked for."""

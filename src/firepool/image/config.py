"""What a container of the image runs, and as whom: the `config` object of an OCI image config.

It is a value of its own, not a dict, because two sources must agree on it: the pool image
reads it from pool-base.Dockerfile's final stage (so a registry build and this one run the
same command), and other images (the test cluster's `pause`) state it in code."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: `platform.machine()` to the GOARCH names OCI platforms use.
ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class ImageConfig:
    """`env` keeps its order (the Dockerfile's), `exposed_ports` are `port/protocol`."""

    cmd: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    working_dir: str | None = None
    exposed_ports: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def argv(self) -> tuple[str, ...]:
        """What a container runs when nobody overrides it: entrypoint, then cmd."""
        return (*self.entrypoint, *self.cmd)

    def to_oci(self) -> dict[str, Any]:
        config: dict[str, Any] = {}
        if self.user is not None:
            config["User"] = self.user
        if self.env:
            config["Env"] = [f"{key}={value}" for key, value in self.env.items()]
        if self.working_dir is not None:
            config["WorkingDir"] = self.working_dir
        if self.exposed_ports:
            config["ExposedPorts"] = {port: {} for port in self.exposed_ports}
        if self.entrypoint:
            config["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            config["Cmd"] = list(self.cmd)
        if self.labels:
            config["Labels"] = dict(self.labels)
        return config


def host_architecture() -> str:
    """The image holds this host's binaries, so it is for this host's architecture."""
    machine = platform.machine()
    return ARCHITECTURES.get(machine, machine)

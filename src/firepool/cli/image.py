"""`firepool image build`: the pool base image as an OCI archive, here, without docker."""

from __future__ import annotations

from pathlib import Path

import typer

from firepool.cli.common import broker_errors

image_app = typer.Typer(help="Images built here, without docker or a registry.")


@image_app.callback()
def image_main() -> None:
    """Images built here, without docker or a registry."""


@image_app.command("build")
def build(
    output: Path = typer.Option(
        Path("build/pool-base.oci.tar"), "--output", "-o", help="Write the archive here."
    ),
    name: str | None = typer.Option(
        None, "--name", help="The image's name (default firepool/base:<version>)."
    ),
    dockerfile: Path | None = typer.Option(
        None,
        "--dockerfile",
        help="The definition whose final stage gives the config (default: the checkout's "
        "deploy/docker/pool-base.Dockerfile).",
    ),
) -> None:
    """Build the pool base image (the pod agent, this interpreter, nothing of the broker) as
    an OCI archive that `ctr -n k8s.io images import` loads onto a node."""
    from firepool.image import build_pool_image

    with broker_errors():
        built = build_pool_image(output, name, dockerfile)
    typer.echo(
        f"{built.path}: {built.name} {built.digest} "
        f"({built.size / 2**20:.1f} MiB, {built.files} files, {built.seconds:.1f} s)"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")

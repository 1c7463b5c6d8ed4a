"""The pool image, built once per session: each build copies the interpreter and takes a few
seconds, and most tests only read the archive."""

from __future__ import annotations

import pytest
from oci_reader import Image, read_archive

from firepool.image import BuiltImage, build_pool_image


@pytest.fixture(scope="session")
def pool_build(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    return build_pool_image(tmp_path_factory.mktemp("pool-image") / "pool-base.oci.tar")


@pytest.fixture(scope="session")
def pool_image(pool_build: BuiltImage) -> Image:
    return read_archive(pool_build.path)

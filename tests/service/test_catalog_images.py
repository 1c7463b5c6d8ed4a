"""Custom images in the catalog: each pool's allowlist, and `[local_images]` (what an image is
on the local backend); an admitted image the local backend could not run is refused at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from firepool.backends.local import LocalBackend
from firepool.model import ConfigError
from firepool.service.catalog import load_catalog, parse_catalog
from firepool.testing.images import DIGEST

POOL = {"name": "cpu", "allowed_images": ["local/ml", f"other/env@{DIGEST}"]}


def test_allowlists_and_local_images_come_from_the_catalog(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(
        '[[pools]]\nname = "cpu"\nallowed_images = ["local/ml"]\n'
        f'[local_images]\n"local/ml" = "{tmp_path}"\n'
    )
    catalog = load_catalog(path)
    assert catalog.pools[0].allowed_images == ("local/ml",)
    assert catalog.local_images == {"local/ml": str(tmp_path)}
    assert parse_catalog({"pools": [POOL]}).local_images == {}


@pytest.mark.parametrize(
    ("local_images", "field"),
    [
        ({"local/ml": "relative/dir"}, "local_images.local/ml"),
        ({"local/ml": 3}, "local_images.local/ml"),
        ({"bad ref": "/opt/env"}, "local_images.bad ref"),
        (["local/ml"], "local_images"),
    ],
)
def test_bad_local_images_are_typed_errors_naming_the_key(local_images: object, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_catalog({"pools": [POOL], "local_images": local_images})
    assert err.value.field == field


def test_the_local_backend_resolves_images_and_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").touch()
    pinned = f"other/env@{DIGEST}"
    catalog = parse_catalog({"pools": [POOL], "local_images": {"local": str(env)}})
    backend = LocalBackend(tmp_path / "pods", isolation="weak", images=catalog.local_images)
    # Exact reference, then repository, then each parent path of the repository.
    assert backend.environment("local/ml/deep:v1") == env
    with pytest.raises(ConfigError) as err:
        backend.check_pools(catalog.pools)  # `other/env@...` has no environment here
    assert err.value.field == "local_images" and "pool cpu" in err.value.message
    assert "other/env" in err.value.message
    nowhere = tmp_path / "nowhere"
    backend.images[pinned] = nowhere
    with pytest.raises(ConfigError, match="has no bin/python"):
        backend.check_pools(catalog.pools)
    backend.images[pinned] = env
    backend.check_pools(catalog.pools)

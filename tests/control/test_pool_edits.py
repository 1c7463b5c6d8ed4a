"""Which stored pool edits a starting broker runs on top of its catalog file."""

from __future__ import annotations

from firepool.control.pool_edits import stored_edits_to_apply
from firepool.testing.control import cpu_pool, gpu_pool

CATALOG = {"cpu": cpu_pool("cpu", max_count=4), "gpu": gpu_pool("gpu")}


def test_an_edit_at_or_above_the_catalog_s_version_is_applied() -> None:
    scaled = CATALOG["cpu"].model_copy(update={"max_count": 9})
    imaged = CATALOG["gpu"].model_copy(update={"image": "new", "template_version": 2})
    chosen = stored_edits_to_apply(CATALOG, [scaled, imaged])
    assert chosen.apply == (scaled, imaged)
    assert chosen.skipped == ()


def test_a_catalog_that_moved_past_the_edit_wins() -> None:
    catalog = {"cpu": CATALOG["cpu"].model_copy(update={"template_version": 3, "image": "c"})}
    edit = CATALOG["cpu"].model_copy(update={"template_version": 2, "image": "e"})
    chosen = stored_edits_to_apply(catalog, [edit])
    assert chosen.apply == ()
    (line,) = chosen.skipped
    assert "'cpu'" in line and "catalog wins" in line


def test_an_edit_of_a_pool_gone_from_the_catalog_is_reported_not_fatal() -> None:
    gone = cpu_pool("old")
    kept = CATALOG["cpu"].model_copy(update={"max_count": 5})
    chosen = stored_edits_to_apply(CATALOG, [gone, kept])
    assert chosen.apply == (kept,)
    (line,) = chosen.skipped
    assert "'old'" in line and "not in the catalog" in line


def test_an_edit_that_no_longer_fits_the_catalog_is_skipped() -> None:
    catalog = {"gpu": gpu_pool("gpu", accelerators_per_pod=2)}
    edit = CATALOG["gpu"].model_copy(update={"max_count": 7})
    chosen = stored_edits_to_apply(catalog, [edit])
    assert chosen.apply == ()
    (line,) = chosen.skipped
    assert "accelerators_per_pod" in line

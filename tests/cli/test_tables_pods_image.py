"""`firepool pods` shows each pod's custom image (`-` for the pool's own)."""

from __future__ import annotations

from rich.console import Console

from firepool.api.schemas import PodView
from firepool.cli.tables import pods_table

PINNED = "local/ml@sha256:" + "7" * 64


def test_the_pods_table_has_an_image_column() -> None:
    pods = [
        PodView(name="cpu-a", pool="cpu", role="active", state="held", created_at=0.0,
                image=PINNED),
        PodView(name="cpu-b", pool="cpu", role="active", state="idle", created_at=0.0),
    ]  # fmt: skip
    console = Console(width=400, force_terminal=True, no_color=True, record=True)
    console.print(pods_table(pods, now=10.0))
    header, first, second = console.export_text().splitlines()
    assert "IMAGE" in header.split()
    assert PINNED in first.split()
    column = header.split().index("IMAGE")
    assert second.split()[column] == "-"

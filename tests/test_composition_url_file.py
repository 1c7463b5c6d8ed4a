"""The broker's `url` file is never seen empty or cut short by a reader that waits for it.

A reader polls for the file and reads it the moment it exists, as local clients do, while the
writer publishes it again and again. Written in place (`Path.write_text`), the file exists
empty for a moment and this reader catches that within a few hundred rounds; published by
`publish_file`, every read is the whole text.
"""

from __future__ import annotations

import threading
from pathlib import Path

from firepool.composition import publish_file

TEXT = "http://127.0.0.1:41234\n"
ROUNDS = 2000


def test_a_waiting_reader_only_ever_reads_the_whole_url(tmp_path: Path) -> None:
    path = tmp_path / "url"
    seen: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                seen.append(path.read_text())
            except FileNotFoundError:
                continue

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(ROUNDS):
            path.unlink(missing_ok=True)
            publish_file(path, TEXT)
    finally:
        done.set()
        thread.join(timeout=30)
    assert seen, "the reader never saw the file"
    assert set(seen) == {TEXT}
    assert [p.name for p in tmp_path.iterdir()] == ["url"]  # no temporary file left behind

"""The local backend's pod records on disk: annotation changes go to a journal whose newest
whole line wins, a torn line costs only itself, and compaction loses nothing."""

from __future__ import annotations

from pathlib import Path

from firepool.backends import pod_state
from firepool.backends.base import PodRecord
from firepool.backends.pod_state import PodStateFiles
from firepool.model import PodRole


def _record(**annotations: str) -> PodRecord:
    return PodRecord(
        name="cpu-1",
        pool="cpu",
        role=PodRole.ACTIVE,
        agent_url="http://127.0.0.1:1",
        secret="s",
        created_at=1.0,
        annotations=annotations,
    )


def _annotations(directory: Path) -> list[dict[str, str]]:
    return [r.annotations for r in PodStateFiles(directory).load()]


def test_the_newest_journal_line_wins_over_the_state_file(tmp_path: Path) -> None:
    files = PodStateFiles(tmp_path)
    files.save(_record(marker="m"))
    files.save_annotations(_record(marker="m", owner="alice", hold_until="10"))
    files.save_annotations(_record(marker="m", owner="alice"))
    assert _annotations(tmp_path) == [{"marker": "m", "owner": "alice"}]
    assert len(files.journal_file("cpu-1").read_bytes().splitlines()) == 2


def test_a_torn_line_is_skipped_and_the_next_change_is_not_lost_with_it(tmp_path: Path) -> None:
    files = PodStateFiles(tmp_path)
    files.save(_record())
    files.save_annotations(_record(owner="alice"))
    with open(files.journal_file("cpu-1"), "ab") as fh:
        fh.write(b'{"owner":"bo')  # the broker was killed mid-append
    again = PodStateFiles(tmp_path)
    assert [r.annotations for r in again.load()] == [{"owner": "alice"}]
    # The restarted broker's next change must not be glued to the torn line.
    again.save_annotations(_record(owner="bob"))
    assert _annotations(tmp_path) == [{"owner": "bob"}]


def test_a_line_that_is_not_an_annotation_map_is_skipped(tmp_path: Path) -> None:
    files = PodStateFiles(tmp_path)
    files.save(_record(owner="alice"))
    files.journal_file("cpu-1").write_bytes(b'{"owner":"bob"}\n[1, 2]\n{"owner": 3}\n')
    assert _annotations(tmp_path) == [{"owner": "bob"}]


def test_compaction_folds_the_journal_into_the_state_file(tmp_path: Path) -> None:
    files = PodStateFiles(tmp_path)
    files.save(_record())
    for i in range(pod_state.COMPACT_AFTER + 1):
        files.save_annotations(_record(step=str(i)))
    assert files.journal_file("cpu-1").read_bytes() == b""
    state = PodRecord.model_validate_json(files.state_file("cpu-1").read_text())
    assert state.annotations == {"step": str(pod_state.COMPACT_AFTER)}
    files.save_annotations(_record(step="last"))
    assert _annotations(tmp_path) == [{"step": "last"}]


def test_a_crash_between_compactions_two_writes_reads_back_the_same(tmp_path: Path) -> None:
    """The state file was replaced but the journal not yet emptied: its newest line is the
    map the state file now holds."""
    files = PodStateFiles(tmp_path)
    files.save(_record())
    files.save_annotations(_record(owner="old"))
    files.save_annotations(_record(owner="alice"))
    journal = files.journal_file("cpu-1").read_bytes()
    files.save(_record(owner="alice"))
    files.journal_file("cpu-1").write_bytes(journal)
    assert _annotations(tmp_path) == [{"owner": "alice"}]


def test_remove_leaves_no_file(tmp_path: Path) -> None:
    files = PodStateFiles(tmp_path)
    files.save(_record())
    files.save_annotations(_record(owner="alice"))
    files.remove("cpu-1")
    assert list(tmp_path.iterdir()) == []
    assert PodStateFiles(tmp_path).load() == []


def test_an_unreadable_state_file_is_skipped_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "cpu-9.pod.json").write_text("{not json")
    PodStateFiles(tmp_path).save(_record(owner="alice"))
    assert _annotations(tmp_path) == [{"owner": "alice"}]

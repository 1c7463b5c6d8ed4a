"""`RankLogStorage`: every rank's output, each stream resumable, each byte stored once."""

from __future__ import annotations

from pathlib import Path

import pytest

from firepool.store.logs import RankLogStorage, StreamOffsets


def test_rank_zero_is_the_attempt_log_every_reader_knows(tmp_path: Path) -> None:
    logs = RankLogStorage(tmp_path)
    assert logs.append_stream("j1", 0, 0, "stdout", 0, b"hello\n") == 6
    assert logs.read("j1", 0, offset=0, limit=100).data == b"hello\n"
    assert logs.read_rank("j1", 0, 0, offset=0, limit=100).data == b"hello\n"
    assert logs.offsets("j1", 0, 0) == StreamOffsets(size=6, stdout=6, stderr=0)


def test_each_rank_and_stream_has_its_own_offset(tmp_path: Path) -> None:
    logs = RankLogStorage(tmp_path)
    logs.append_stream("j1", 2, 1, "stdout", 0, b"out1\n")
    logs.append_stream("j1", 2, 1, "stderr", 0, b"err1\n")
    logs.append_stream("j1", 2, 1, "stdout", 5, b"out2\n")
    assert logs.offsets("j1", 2, 1) == StreamOffsets(size=15, stdout=10, stderr=5)
    assert logs.read_rank("j1", 2, 1, offset=0, limit=100).data == b"out1\nerr1\nout2\n"
    assert logs.read("j1", 2, offset=0, limit=100).data == b""  # rank 0 printed nothing
    assert logs.offsets("j1", 2, 0) == StreamOffsets()


def test_bytes_sent_again_are_stored_once(tmp_path: Path) -> None:
    logs = RankLogStorage(tmp_path)
    logs.append_stream("j1", 0, 0, "stdout", 0, b"line1\nline2\n")
    # a pump that resumed from an older offset sends an overlap, then the rest
    assert logs.append_stream("j1", 0, 0, "stdout", 6, b"line2\nline3\n") == 18
    assert logs.append_stream("j1", 0, 0, "stdout", 0, b"line1\n") == 18  # all old: dropped
    assert logs.read("j1", 0, offset=0, limit=100).data == b"line1\nline2\nline3\n"


def test_an_append_a_crash_left_unrecorded_is_replaced_not_repeated(tmp_path: Path) -> None:
    logs = RankLogStorage(tmp_path)
    logs.append_stream("j1", 0, 0, "stdout", 0, b"before\n")
    # the broker died after writing the data but before recording its offsets
    with open(logs.path("j1", 0), "ab") as log:
        log.write(b"after\n")
    restarted = RankLogStorage(tmp_path)  # a new broker process
    # readers never see the unrecorded bytes (the resumed pump may interleave differently)
    assert restarted.read("j1", 0, offset=0, limit=100).data == b"before\n"
    start = restarted.offsets("j1", 0, 0).stdout
    assert start == 7  # so its pump asks the agent for `after` again
    restarted.append_stream("j1", 0, 0, "stdout", start, b"after\n")
    assert restarted.read("j1", 0, offset=0, limit=100).data == b"before\nafter\n"


def test_a_gap_is_marked_never_passed_over(tmp_path: Path) -> None:
    logs = RankLogStorage(tmp_path)
    logs.append_stream("j1", 0, 0, "stderr", 0, b"ab")
    assert logs.append_stream("j1", 0, 0, "stderr", 10, b"z") == 11
    data = logs.read("j1", 0, offset=0, limit=200).data
    assert data.startswith(b"ab\n[firepool: 8 bytes of stderr (offsets 2..10) were lost]\n")
    assert data.endswith(b"z")


def test_a_note_is_committed_like_data(tmp_path: Path) -> None:
    logs = RankLogStorage(tmp_path)
    logs.append_stream("j1", 0, 1, "stdout", 0, b"x")
    logs.note("j1", 0, 1, "output incomplete")
    logs.append_stream("j1", 0, 1, "stdout", 1, b"y")
    assert logs.read_rank("j1", 0, 1, offset=0, limit=100).data == (
        b"x\n[firepool: output incomplete]\ny"
    )
    assert logs.offsets("j1", 0, 1).stdout == 2


def test_bad_keys_are_refused(tmp_path: Path) -> None:
    logs = RankLogStorage(tmp_path)
    with pytest.raises(ValueError, match="rank"):
        logs.rank_path("j1", 0, -1)
    with pytest.raises(ValueError, match="stream"):
        logs.offsets("j1", 0, 0).of("install.log")
    with pytest.raises(ValueError, match="log key"):
        logs.append_stream("../x", 0, 0, "stdout", 0, b"")


def test_a_plain_append_after_stream_appends_stays_committed(tmp_path: Path) -> None:
    logs = RankLogStorage(tmp_path)
    logs.append("j1", 0, b"plain\n")  # no offsets yet: a plain file, read whole
    assert logs.read("j1", 0, offset=0, limit=100).data == b"plain\n"
    logs2 = RankLogStorage(tmp_path / "other")
    logs2.append_stream("j1", 0, 0, "stdout", 0, b"a\n")
    logs2.append("j1", 0, b"b\n")
    logs2.append_stream("j1", 0, 0, "stdout", 2, b"c\n")
    assert logs2.read("j1", 0, offset=0, limit=100).data == b"a\nb\nc\n"

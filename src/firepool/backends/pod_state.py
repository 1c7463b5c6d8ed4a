"""The local backend's durable pod records: one state file per pod plus an annotation journal.

Why a journal: a pod's annotations change twice per job (running, then idle with its hold),
and rewriting the state file atomically (write a temporary, rename it over the old one) costs
0.3-0.5 ms of system time per write on ext4, which forces the replaced file's data out on
rename (`auto_da_alloc`). On the broker's event loop that was about a seventh of its CPU per
short job. Appending one line to a per-pod journal costs a few microseconds.

The files, both 0600 in the backend's `.state` directory:
- `<pod>.pod.json`: the whole `PodRecord`, replaced atomically (temporary + rename) when the pod
  is created, when the agent reports facts about it, and when the journal is compacted;
- `<pod>.annotations.jsonl`: one JSON object per line, each the pod's complete annotation map
  at that moment. The newest whole line wins over the state file's annotations, so a line torn
  by a crash mid-write is skipped and the one before it stands. After `COMPACT_AFTER` lines the
  map goes into the state file and the journal is emptied; a crash between the two leaves a
  journal whose newest line equals the state file's map, which reads back the same.

Like the rename before it, neither file is fsynced: the record survives the broker's crash
(the files are the kernel's once written), not the host's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from firepool.backends.base import PodRecord

log = logging.getLogger("firepool.backends.local")

#: Journal lines before the annotations are folded into the state file.
COMPACT_AFTER = 256


class PodStateFiles:
    """Reads and writes the pod records under one directory; callers serialise writes per pod."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._journal_lines: dict[str, int] = {}

    def state_file(self, name: str) -> Path:
        return self.directory / f"{name}.pod.json"

    def journal_file(self, name: str) -> Path:
        return self.directory / f"{name}.annotations.jsonl"

    def save(self, record: PodRecord) -> None:
        """The whole record, atomically; the journal is emptied after it (its newest line is
        this record's map, or older)."""
        path = self.state_file(record.name)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(record.model_dump_json(indent=1).encode())
        os.replace(tmp, path)
        if self._journal_lines.get(record.name):
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.journal_file(record.name), 0)
        self._journal_lines[record.name] = 0

    def save_annotations(self, record: PodRecord) -> None:
        """The record's annotation map, appended to its journal (or, every `COMPACT_AFTER`
        lines, the whole record saved)."""
        lines = self._journal_lines.get(record.name, 0)
        if lines >= COMPACT_AFTER:
            self.save(record)
            return
        line = json.dumps(record.annotations, separators=(",", ":")).encode() + b"\n"
        fd = os.open(self.journal_file(record.name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self._journal_lines[record.name] = lines + 1

    def load(self) -> list[PodRecord]:
        """Every readable record, with its journal's newest whole line applied."""
        records = []
        for path in sorted(self.directory.glob("*.pod.json")):
            try:
                record = PodRecord.model_validate_json(path.read_text())
            except (OSError, ValueError) as exc:
                log.error("unreadable pod state %s: %s", path, exc)
                continue
            annotations, lines, torn = self._journal(record.name)
            self._journal_lines[record.name] = lines
            if annotations is not None:
                record = record.model_copy(update={"annotations": annotations})
            if torn:  # the next append would join the torn line and be skipped with it
                self.save(record)
            records.append(record)
        return records

    def remove(self, name: str) -> None:
        for path in (self.state_file(name), self.journal_file(name)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._journal_lines.pop(name, None)

    def _journal(self, name: str) -> tuple[dict[str, str] | None, int, bool]:
        """The newest whole annotation map in the pod's journal, its line count, and whether
        its last line was torn (no newline at the end)."""
        try:
            data = self.journal_file(name).read_bytes()
        except FileNotFoundError:
            return None, 0, False
        lines = data.splitlines()
        torn = bool(data) and not data.endswith(b"\n")
        for raw in reversed(lines):
            try:
                value = json.loads(raw)
            except ValueError:
                continue  # torn by a crash mid-append
            if isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                return value, len(lines), torn
            log.error("pod %s: journal line is not an annotation map; skipped", name)
        return None, len(lines), torn

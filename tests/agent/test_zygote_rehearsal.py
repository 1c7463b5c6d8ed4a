"""A spare rehearses its job's set-up before it waits (`zygote._rehearse`): the pages the set-up
writes are copied from the zygote then, off the job's path. The rehearsal must leave the spare
exactly as it was: the job it becomes sees no descriptor, variable or module of it."""

from __future__ import annotations

import json
import os
import sys

import pytest

from firepool.agent import zygote


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_rehearsal_leaves_no_descriptor_variable_or_stream_behind() -> None:
    descriptors = _open_descriptors()
    environ = dict(os.environ)
    main, streams, argv = sys.modules["__main__"], (sys.stdin, sys.stdout, sys.stderr), sys.argv
    path = list(sys.path)

    zygote._rehearse()

    assert _open_descriptors() == descriptors
    assert dict(os.environ) == environ
    assert sys.modules["__main__"] is main
    assert (sys.stdin, sys.stdout, sys.stderr) == streams
    assert sys.argv is argv
    assert sys.path == path


def test_a_rehearsal_without_dev_null_still_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where /dev/null cannot be opened (a bare container), the spare goes on waiting."""
    monkeypatch.setattr(zygote.os, "devnull", "/nonexistent/null")
    descriptors = _open_descriptors()
    zygote._rehearse()
    assert _open_descriptors() == descriptors


def test_the_rehearsed_request_is_a_spawn_request_the_set_up_reads() -> None:
    req = json.loads(zygote._REHEARSAL)
    assert req["op"] == "spawn" and req["mode"] == "fork"
    assert zygote.python_entry(req["argv"]) is not None  # the warm path, as a real job's

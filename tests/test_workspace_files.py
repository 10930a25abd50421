"""The files of a workspace: side logs appended whole."""

from __future__ import annotations

import errno
import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopscribe import (
    Workspace,
    WriteError,
)

from .scripted import scripted

HOLD = textwrap.dedent(
    """
    import sys
    from loopscribe import Session
    with Session.open(sys.argv[1]):
        print("ready", flush=True)
        sys.stdin.readline()
    """
)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Workspace, list[str]]]:
    """A workspace of three sessions, the second held open by another process."""
    ws = Workspace(tmp_path)
    ids = []
    for n in range(3):
        with ws.create(title=f"session {n}") as session:
            ids.append(session.id)
    with scripted(HOLD, str(ws.path(ids[1]))) as holder:
        yield ws, ids
        holder.go()


def _side(ws: Workspace, session_id: str) -> Path:
    return ws.path(session_id).with_name(f"{session_id}.jsonl.meta")


def _failing_side_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes to a side log: the first stops halfway, every later one finds the disk full."""
    real_write = os.write
    calls = [0]

    def write(fd: int, data: Any) -> int:
        if not os.readlink(f"/proc/self/fd/{fd}").endswith(".meta"):
            return real_write(fd, data)
        calls[0] += 1
        if calls[0] == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write)


def test_a_side_log_write_cut_short_is_cut_back(
    held: tuple[Workspace, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half a fact then a full disk: one WriteError naming the side log, no half line left."""
    ws, ids = held
    ws.update(ids[1], title="first")
    before = _side(ws, ids[1]).read_bytes()
    _failing_side_writes(monkeypatch)
    with pytest.raises(WriteError) as caught:
        ws.update(ids[1], title="lost " + "x" * 500)
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert str(_side(ws, ids[1])) in str(caught.value)
    assert "free space" in str(caught.value)
    assert _side(ws, ids[1]).read_bytes() == before
    assert ws.update(ids[1], title="after").title == "after"
    listed = Workspace(ws.root).list()
    assert sorted(s.id for s in listed) == sorted(ids)
    assert {s.id: s.title for s in listed}[ids[1]] == "after"


def test_a_torn_side_log_line_is_removed_before_the_next_fact(
    held: tuple[Workspace, list[str]],
) -> None:
    """A line a crash left unfinished is cut before the next update appends; every session lists."""
    ws, ids = held
    ws.update(ids[1], title="first")
    with open(_side(ws, ids[1]), "ab") as stream:
        stream.write(b'{"type":"session_update","ts":"2026-')  # a crash mid-write
    assert Workspace(ws.root).get(ids[1]).title == "first"  # readers ignore the torn line
    ws.set_todos(ids[1], [{"id": "1", "text": "after the crash", "status": "open"}])
    lines = _side(ws, ids[1]).read_bytes().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["session_update", "todos"]
    listed = {s.id: s for s in Workspace(ws.root).list()}
    assert sorted(listed) == sorted(ids)
    assert [t["text"] for t in listed[ids[1]].todos] == ["after the crash"]

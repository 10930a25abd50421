"""The files of a workspace: side logs appended whole, huge lines read linearly, artifacts,
unreadable files named."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopscribe import (
    AssistantMessage,
    Execution,
    TextContent,
    ToolResultMessage,
    UserMessage,
    Workspace,
    WriteError,
    _backread,
)
from loopscribe import events as ev
from loopscribe import workspace as workspace_module
from loopscribe._backread import reverse_lines, tail_offset

from .scripted import held_to_file_modes, scripted

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


# -- one huge line -------------------------------------------------------------------------


class Metered(bytes):
    """Bytes a reader got from a file; every look at them is charged to ``meter``.

    Searching, splitting, slicing or concatenating costs a pass over the
    bytes involved; a reader that is linear in what it reads stays within a
    small multiple of the file's size, one that copies a growing line again
    for every block does not.
    """

    meter: list[int]


def _charged(name: str, cost: Callable[[bytes, tuple[Any, ...], Any], int]) -> Any:
    method = getattr(bytes, name)

    def charged(self: Metered, *args: Any) -> Any:
        result = method(self, *args)
        self.meter[0] += cost(self, args, result)
        return result

    return charged


def _whole(data: bytes, args: tuple[Any, ...], result: Any) -> int:
    return len(data)


def _both(data: bytes, args: tuple[Any, ...], result: Any) -> int:
    return len(data) + len(args[0])


def _result(data: bytes, args: tuple[Any, ...], result: Any) -> int:
    return len(result) if isinstance(result, bytes) else 1


for _name in ("__contains__", "find", "rfind", "index", "rindex", "count", "split", "rsplit"):
    setattr(Metered, _name, _charged(_name, _whole))
Metered.__add__ = _charged("__add__", _both)  # type: ignore[method-assign]
Metered.__getitem__ = _charged("__getitem__", _result)  # type: ignore[method-assign]
Metered.splitlines = _charged("splitlines", _whole)  # type: ignore[method-assign]


@pytest.fixture
def meter(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes read from session files by range, plus every look at them, counted."""
    meter = [0]

    class MeteredSource(_backread.FileSource):
        __slots__ = ()

        def pread(self, size: int, offset: int) -> bytes:
            block = Metered(super().pread(size, offset))
            block.meter = meter
            meter[0] += len(block)
            return block

    monkeypatch.setattr(workspace_module, "FileSource", MeteredSource)
    return meter


def _huge(ws: Workspace, line_bytes: int) -> str:
    tool = Execution("call_1", "tool")
    with ws.create(title="huge") as session, session.begin_run() as run:
        run.record(ev.message_end(None, UserMessage("Dump the table.")))
        output = TextContent("0123456789abcdef" * (line_bytes // 16))
        run.record(ev.message_end(tool, ToolResultMessage("call_1", "dump", (output,))))
        run.record(ev.message_end(None, AssistantMessage((TextContent("Done."),))))
        return session.id


@pytest.mark.parametrize("line_mb", [1, 8])
def test_reading_back_over_one_huge_line_is_linear(
    tmp_path: Path, meter: list[int], line_mb: int
) -> None:
    """messages() and tail_offset() over a line of megabytes do work linear in the file's size."""
    ws = Workspace(tmp_path)
    sid = _huge(ws, line_mb << 20)
    size = ws.path(sid).stat().st_size
    page = Workspace(tmp_path).messages(sid, last=50)
    assert [type(m).__name__ for m in page.messages] == [
        "UserMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    assert len(page.messages[1].content[0].text) == line_mb << 20
    assert meter[0] <= 4 * size, f"{meter[0] / size:.1f}x the file's size"
    meter[0] = 0
    assert tail_offset(ws.path(sid), 10) == 0
    assert meter[0] <= 4 * size, f"{meter[0] / size:.1f}x the file's size"


class _Bytes:
    """A byte string as a range source."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def pread(self, size: int, offset: int) -> bytes:
        return self.data[offset : offset + size]

    def complete_end(self) -> int:
        return self.data.rfind(b"\n") + 1

    def close(self) -> None:
        pass


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64])
def test_reverse_lines_gives_every_line_and_offset_at_any_block_size(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Lines shorter, as long as, and longer than a block, empty lines too: all back, in order."""
    monkeypatch.setattr(_backread, "BLOCK_BYTES", block)
    lines = [b"a\n", b"\n", b"bcdefgh\n", b"x" * 150 + b"\n", b"ij\n", b"\n", b"k" * 7 + b"\n"]
    data = b"".join(lines)
    offsets = [sum(map(len, lines[:i])) for i in range(len(lines))]
    got = list(reverse_lines(_Bytes(data), len(data)))
    assert got == list(zip(offsets, lines, strict=True))[::-1]
    assert list(reverse_lines(_Bytes(data), offsets[3])) == got[-3:]


# -- artifacts --------------------------------------------------------------------------------


def test_an_artifact_is_kept_privately_and_listed(tmp_path: Path) -> None:
    """add_artifact writes a 0600 file in a 0700 folder and replaces one of the same name."""
    ws = Workspace(tmp_path)
    with ws.create() as session:
        pass
    first = ws.add_artifact(session.id, "plan.md", b"# draft\n")
    second = ws.add_artifact(session.id, "plan.md", b"# final plan\n")
    assert first.path == second.path == ws.artifact_dir(session.id) / "plan.md"
    assert [(a.name, a.size) for a in ws.artifacts(session.id)] == [("plan.md", 13)]
    assert ws.artifact_dir(session.id).stat().st_mode & 0o777 == 0o700
    assert second.path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("name", ["", ".", "..", "../escape", "a/b", ".hidden", "a\0b", "x" * 256])
def test_an_artifact_name_that_is_not_a_plain_file_name_is_refused(
    tmp_path: Path, name: str
) -> None:
    """Folders, parents, hidden names, NUL and overlong names never become a path."""
    ws = Workspace(tmp_path)
    with ws.create() as session:
        pass
    with pytest.raises(ValueError, match="not an artifact name"):
        ws.add_artifact(session.id, name, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{session.id}.jsonl"]


def test_a_planted_symlink_is_never_written_through(tmp_path: Path) -> None:
    """A symlink as the artifact folder, or at an artifact's temporary name, is not followed."""
    ws = Workspace(tmp_path / "ws")
    with ws.create() as session:
        pass
    outside = tmp_path / "outside"
    outside.mkdir()
    ws.artifact_dir(session.id).symlink_to(outside)
    with pytest.raises(FileExistsError, match="symbolic link"):
        ws.add_artifact(session.id, "a.txt", b"x")
    ws.artifact_dir(session.id).unlink()
    ws.artifact_dir(session.id).mkdir()
    victim = outside / "victim"
    victim.write_bytes(b"keep")
    (ws.artifact_dir(session.id) / "a.txt.tmp").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic links"):
        ws.add_artifact(session.id, "a.txt", b"x")
    assert victim.read_bytes() == b"keep"
    assert list(outside.iterdir()) == [victim]


# -- files that cannot be read --------------------------------------------------------------

LIST = textwrap.dedent(
    """
    import json, sys
    from loopscribe import Workspace
    ws = Workspace(sys.argv[1])
    listed = [s.id for s in ws.list()]
    print(json.dumps({
        "listed": listed,
        "unreadable": [[str(p), e.errno, str(e)] for p, e in ws.unreadable],
    }))
    """
)


def test_list_leaves_out_a_file_it_cannot_read_and_names_it(tmp_path: Path) -> None:
    """A session file of mode 000 does not hide the others; ``unreadable`` names it and why."""
    ws = Workspace(tmp_path)
    ids = []
    for n in range(3):
        with ws.create(title=f"s{n}") as session:
            ids.append(session.id)
    locked = ws.path(ids[0])
    locked.chmod(0)
    done = subprocess.run(
        held_to_file_modes([sys.executable, "-c", LIST, str(tmp_path)]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = json.loads(done.stdout)
    assert sorted(got["listed"]) == sorted(ids[1:])
    [(path, code, message)] = got["unreadable"]
    assert (path, code) == (str(locked), errno.EACCES)
    assert str(locked) in message

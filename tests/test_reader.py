"""Reading and validating session files, and repairing an interrupted tail on open."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from loopscribe import (
    CorruptRecordError,
    Event,
    Execution,
    FormatError,
    Session,
    UnsupportedVersionError,
    read,
)


def make_file(path: Path, events: int = 3) -> bytes:
    """Record a small session and return its bytes."""
    with Session.create(path) as s, s.begin_run() as run:
        for i in range(events):
            run.record(Event("tool_exec_start", Execution(f"c{i}", "tool"), {"i": i}))
    return path.read_bytes()


def test_read_streams_records_with_offsets(session_path: Path) -> None:
    """read yields every record in order, each pointing at its own bytes."""
    raw = make_file(session_path)
    records = list(read(session_path))
    assert [r.seq for r in records] == list(range(6))
    for r in records:
        assert orjson.loads(raw[r.offset : r.end_offset])["seq"] == r.seq
    assert records[-1].end_offset == len(raw)
    assert records[2].execution == Execution("c0", "tool")
    assert records[2].data == {"i": 0}


def test_read_accepts_a_binary_file_object(session_path: Path) -> None:
    """read works on an open binary stream as well as on a path."""
    raw = make_file(session_path)
    assert [r.seq for r in read(io.BytesIO(raw))] == list(range(6))


@pytest.mark.parametrize("tail", [b'{"partial', b'{"session_id":"x","seq":6}'])
def test_final_line_without_newline_is_ignored_even_if_valid_json(
    session_path: Path, tail: bytes
) -> None:
    """Only a final line without a newline is ignored, whatever it contains."""
    raw = make_file(session_path)
    session_path.write_bytes(raw + tail)
    assert len(list(read(session_path))) == 6


def test_open_removes_exactly_the_unfinished_tail(session_path: Path) -> None:
    """Session.open truncates the unfinished line and appends after the last complete one."""
    raw = make_file(session_path)
    session_path.write_bytes(raw + b'{"session_id":"whatever","seq":6,"type":"x"}')
    with Session.open(session_path) as s:
        assert s.size == len(raw)
        assert session_path.read_bytes() == raw
        with s.begin_run():
            pass
    assert session_path.read_bytes().startswith(raw)
    assert [r.seq for r in read(session_path)] == list(range(8))


def corrupt_cases(raw: bytes) -> list[tuple[str, bytes, int]]:
    """(name, damaged bytes, 1-based line that is reported)."""
    lines = raw.splitlines(keepends=True)
    third = orjson.loads(lines[2])
    gap = dict(third, seq=9)
    foreign = dict(third, session_id="f" * 32)
    return [
        ("not json", b"".join([*lines[:2], b"{oops\n", *lines[3:]]), 3),
        ("gap in seq", b"".join([*lines[:2], orjson.dumps(gap) + b"\n", *lines[3:]]), 3),
        ("foreign session", b"".join([*lines[:2], orjson.dumps(foreign) + b"\n", *lines[3:]]), 3),
        ("not an object", b"".join([*lines[:3], b"[1,2]\n", *lines[4:]]), 4),
        ("empty line", b"".join([*lines[:3], b"\n", *lines[3:]]), 4),
        ("duplicated line", b"".join([*lines[:3], lines[2], *lines[3:]]), 4),
    ]


@pytest.mark.parametrize("case", range(6))
def test_complete_corrupt_lines_fail_with_path_line_and_offset(
    session_path: Path, case: int
) -> None:
    """A damaged complete line is an error naming path, line and byte offset, on read and open."""
    raw = make_file(session_path)
    name, damaged, line = corrupt_cases(raw)[case]
    session_path.write_bytes(damaged)
    offset = sum(len(x) for x in damaged.splitlines(keepends=True)[: line - 1])
    for action in (lambda: list(read(session_path)), lambda: Session.open(session_path)):
        with pytest.raises(CorruptRecordError) as info:
            action()
        err = info.value
        assert (err.line, err.offset) == (line, offset), name
        assert str(session_path) in str(err)
        assert f":{line}: byte {offset}:" in str(err)
    assert session_path.read_bytes() == damaged  # open never "fixes" damage


def test_unsupported_version_fails_naming_the_place(session_path: Path) -> None:
    """A file declaring another format version is refused by read and open."""
    raw = make_file(session_path)
    first, rest = raw.split(b"\n", 1)
    start = orjson.loads(first)
    start["data"]["format_version"] = 2
    session_path.write_bytes(orjson.dumps(start) + b"\n" + rest)
    with pytest.raises(UnsupportedVersionError, match=r"format_version 2") as info:
        list(read(session_path))
    assert (info.value.line, info.value.offset) == (1, 0)
    with pytest.raises(UnsupportedVersionError):
        Session.open(session_path)


def test_first_record_must_be_session_start(session_path: Path) -> None:
    """A file that does not begin with session_start is not a session file."""
    raw = make_file(session_path)
    lines = raw.splitlines(keepends=True)
    session_path.write_bytes(b"".join(lines[1:]))
    with pytest.raises(CorruptRecordError, match="expected seq 0"):
        list(read(session_path))


def test_open_of_an_empty_file_explains_itself(session_path: Path) -> None:
    """An empty file has no session_start; the error says how to recover."""
    session_path.write_bytes(b"")
    with pytest.raises(FormatError, match=r"no complete session_start.*Session\.create"):
        Session.open(session_path)


def test_read_of_a_record_with_a_bad_timestamp_fails_cleanly(session_path: Path) -> None:
    """A structurally valid line with an impossible timestamp is reported, not crashed on."""
    raw = make_file(session_path)
    lines = raw.splitlines(keepends=True)
    obj = orjson.loads(lines[2])
    obj["ts"] = "yesterday"
    session_path.write_bytes(b"".join([*lines[:2], orjson.dumps(obj) + b"\n", *lines[3:]]))
    with pytest.raises(CorruptRecordError) as info:
        list(read(session_path))
    assert info.value.line == 3


def test_records_of_one_call_share_their_execution_but_each_is_checked(
    session_path: Path,
) -> None:
    """Equal executions read back equal; one that only compares equal (attempt true) is refused."""
    ex = Execution("c1", "tool", attempt=1, parent_id="turn")
    with Session.create(session_path) as s, s.begin_run() as run:
        run.record(Event("tool_exec_start", ex, {}))
        run.record(Event("tool_invoke_start", ex, {}))
        run.record(Event("note", None, {}))
        run.record(Event("tool_exec_end", ex, {}))
    got = [r.execution for r in read(session_path) if r.type != "run_close"][2:]
    assert got == [ex, ex, None, ex]
    lines = session_path.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b'"attempt":1', b'"attempt":true')  # True == 1 in Python
    session_path.write_bytes(b"".join(lines))
    with pytest.raises(CorruptRecordError) as info:
        list(read(session_path))
    assert info.value.line == 4

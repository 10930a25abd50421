"""A buffered Session: blocks of lines, a bulk writer that writes what ``Run.record`` writes,
a run continued without a gap, and what a SIGKILL leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

import loopscribe
from loopscribe import Event, Execution, Redactor, RunStateError, Session, read, verify
from loopscribe import events as ev

SECRET = "sk-bulk-7f3a9c1e5b2d4f6a8c0e"
EVENTS: list[tuple[str, Execution | None, dict[str, Any]]] = [
    (ev.MESSAGE_END, None, {"message": {"role": "user", "content": "hi"}, "source": {"line": 1}}),
    (
        ev.TOOL_EXEC_START,
        Execution("toolu_1", "tool", 1, "msg_1"),
        {"tool": "Bash", "args": {"$ls": "not a type", "cmd": f"echo {SECRET}"}},
    ),
    (
        ev.TOOL_EXEC_END,
        Execution("toolu_1", "tool", 1, "msg_1"),
        {"result": orjson.Fragment(b'{"ok":true,"n":[1,2.5,"\\u001b"]}'), "is_error": False},
    ),
    (ev.MODEL_EXEC_END, Execution("msg_1", "model"), {"usage": {"input_tokens": 2**63}}),
]


def _strip(line: bytes) -> bytes:
    """A line without what differs between two writes of one event: seq, chain link, count."""
    obj: dict[str, Any] = orjson.loads(line)
    obj.pop("seq")
    obj.pop("prev", None)
    obj.pop("messages", None)  # the file's running message count
    return orjson.dumps(obj)  # keeps the key order


@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("redact", [False, True])
def test_bulk_lines_equal_run_record(tmp_path: Path, chain: bool, redact: bool) -> None:
    """Each event written both ways gives the same line, the chain stays whole, secrets go."""
    path = tmp_path / "s.jsonl"
    redactor = Redactor(secrets=[SECRET]) if redact else None
    when = datetime(2026, 2, 10, 21, 11, 56, 846000, tzinfo=UTC)
    with Session.create(path, chain=chain, redact=redactor, buffered=True) as session:
        run = session.begin_run(timestamp=when)
        writer = run.bulk()
        for kind, execution, data in EVENTS:
            run.record(Event(kind, execution, data, when))
            writer.write(kind, execution, data, when)
        run.close(timestamp=when)
    lines = path.read_bytes().splitlines()
    kinds = {kind.encode() for kind, _, _ in EVENTS}
    written = [line for line in lines if orjson.loads(line)["type"].encode() in kinds]
    assert len(written) == 2 * len(EVENTS)
    for normal, bulk in zip(written[::2], written[1::2], strict=True):
        assert _strip(bulk) == _strip(normal)
    assert [r.seq for r in read(path)] == list(range(len(lines)))
    assert (SECRET.encode() in path.read_bytes()) is not redact
    escaped = [r for r in read(path) if r.type == ev.TOOL_EXEC_START]
    assert all(r.data["args"]["$ls"] == "not a type" for r in escaped)
    if chain:
        assert verify(path).ok


def test_bulk_needs_a_buffered_session(tmp_path: Path) -> None:
    """A session writing each record at once (or with observers) never takes the bulk path."""
    with Session.create(tmp_path / "s.jsonl") as session:
        run = session.begin_run()
        with pytest.raises(ValueError, match="buffered"):
            run.bulk()
        run.close()


def test_flush_writes_the_block_and_nothing_waits_unbuffered(tmp_path: Path) -> None:
    """Records of a buffered Session reach the file on flush(); an unbuffered one has no block."""
    path = tmp_path / "s.jsonl"
    with Session.create(path, buffered=True) as session:
        assert session.buffered
        run = session.begin_run()
        run.bulk().write(ev.MESSAGE_END, None, {"message": {"role": "user", "content": "hi"}})
        assert [r.type for r in read(path)] == [ev.SESSION_START]
        session.flush()
        assert [r.type for r in read(path)] == [ev.SESSION_START, ev.RUN_START, ev.MESSAGE_END]
        assert path.stat().st_size == session.size
    with Session.open(path) as again:
        assert not again.buffered
        again.flush()  # nothing waits: a no-op


@pytest.mark.parametrize("gap", [True, False])
def test_resume_run_without_a_gap_writes_no_run_resume(tmp_path: Path, gap: bool) -> None:
    """gap=False continues the open run as if it never stopped; gap=True marks the resume."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session:
        run = session.begin_run()
        run.record(Event(ev.MESSAGE_END, None, {"message": {"role": "user", "content": "a"}}))
        run.detach()
    with Session.open(path, buffered=True) as session:
        with pytest.raises(RunStateError, match="not the file's last open run"):
            session.resume_run("0" * 16, gap=gap)
        again = session.resume_run(run.id, gap=gap)
        again.bulk().write(ev.MESSAGE_END, None, {"message": {"role": "user", "content": "b"}})
        again.close()
    kinds = [r.type for r in read(path)]
    resumed = [ev.RUN_RESUME] if gap else []
    assert kinds == [
        ev.SESSION_START,
        ev.RUN_START,
        ev.MESSAGE_END,
        *resumed,
        ev.MESSAGE_END,
        ev.RUN_CLOSE,
    ]
    assert {r.run_id for r in read(path) if r.run_id is not None} == {run.id}


_CHILD = """
import os, sys
from pathlib import Path
from loopscribe import Execution, Session
path, flushed, after = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
session = Session.create(path, buffered=True)
run = session.begin_run()
writer = run.bulk()
tool = Execution("tool-1", "tool")
for i in range(flushed + after):
    if i == flushed and after:
        session.flush()
    writer.write("tool_exec_start", tool, {"i": i, "pad": "x" * 3000})
print(run.id, os.stat(path).st_size, session.size, flush=True)
sys.stdin.read()  # killed while it waits
"""


@pytest.mark.parametrize(
    ("flushed", "after"),
    [(100, 50), (1000, 0)],
    ids=["killed-after-flush", "killed-after-full-blocks"],
)
def test_sigkill_keeps_every_written_block_and_the_import_continues(
    tmp_path: Path, flushed: int, after: int
) -> None:
    """A killed buffered writer leaves whole records up to its last block; reopening continues.

    With ``flush()`` after 100 records the file ends exactly there; with no
    flush, the full blocks of 1,000 records are there (a prefix, whole lines)
    and the rest is not. Then the same records are written again from where
    the file ends, into the same run, as an import resumes.
    """
    path = tmp_path / "s.jsonl"
    src = Path(loopscribe.__file__).resolve().parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), str(flushed), str(after)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(src)},
        text=True,
    )
    with child:
        try:
            assert child.stdout is not None
            run_id, on_disk, written = child.stdout.readline().split()
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert path.stat().st_size == int(on_disk) < int(written)
    data = path.read_bytes()
    assert data.endswith(b"\n")
    kept = [r.data["i"] for r in read(path) if r.type == "tool_exec_start"]
    total = flushed + after
    if after:
        assert kept == list(range(flushed))
    else:
        assert 0 < len(kept) < total
        assert kept == list(range(len(kept)))
    with Session.open(path, buffered=True) as session:
        assert session.size == len(data)  # nothing was cut: the file ends on a whole record
        run = session.resume_run(run_id, gap=False)
        writer = run.bulk()
        tool = Execution("tool-1", "tool")
        for i in range(len(kept), total):
            writer.write("tool_exec_start", tool, {"i": i, "pad": "x" * 3000})
        run.close()
    records = list(read(path))
    assert [r.data["i"] for r in records if r.type == "tool_exec_start"] == list(range(total))
    assert [r.seq for r in records] == list(range(len(records)))
    assert [r.type for r in records].count(ev.RUN_START) == 1
    assert ev.RUN_RESUME not in {r.type for r in records}

"""The importers' bulk write path writes exactly the line ``Run.record`` writes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import Event, Execution, Redactor, Session, read, verify
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
    with Session.create(path, chain=chain, redact=redactor) as session:
        session._buffer_writes()
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


def test_bulk_needs_buffered_writes(tmp_path: Path) -> None:
    """A session writing each record at once (or with observers) never takes the bulk path."""
    with Session.create(tmp_path / "s.jsonl") as session:
        run = session.begin_run()
        with pytest.raises(ValueError, match="buffered"):
            run.bulk()
        run.close()

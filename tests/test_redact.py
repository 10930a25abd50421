"""Application secrets are scrubbed from lines before they are written."""

from __future__ import annotations

import base64
import urllib.parse
from pathlib import Path

from loopscribe import (
    COMMON_PATTERNS,
    Event,
    Execution,
    Record,
    Redactor,
    Session,
    read,
)
from loopscribe import events as ev

SECRET = 'sk-CANARY-with"quote\\and-slash-0123456789'
TOKEN = "ghp_" + "A" * 36


def test_known_values_and_patterns_never_reach_the_file_or_observers(session_path: Path) -> None:
    """A secret in tool arguments, outputs and exception messages is replaced everywhere."""
    seen: list[Record] = []
    redact = Redactor([SECRET], patterns=COMMON_PATTERNS)
    tool = Execution("c1", "tool")
    with (
        Session.create(session_path, redact=redact, observers=[seen.append]) as s,
        s.begin_run() as run,
    ):
        run.record(ev.tool_exec_start(tool, "http", {"headers": {"X-Key": SECRET}}))
        run.record(ev.tool_exec_end(tool, "http", f"echo {TOKEN}", error=ValueError(SECRET)))
        run.record(Event("note", None, {"auth": f"Bearer {'x' * 40}"}))
    raw = session_path.read_bytes()
    for leak in (SECRET, TOKEN, "x" * 40):
        assert leak.encode() not in raw
        assert base64.b64encode(leak.encode()) not in raw
        assert urllib.parse.quote(leak).encode() not in raw
    assert raw.count(b"[REDACTED]") == 4
    records = list(read(session_path))
    assert records[2].data["args"] == {"headers": {"X-Key": "[REDACTED]"}}
    live = next(r for r in seen if r.type == "tool_exec_start")
    assert live.data == records[2].data  # observers see what the file holds
    assert "[REDACTED]" in repr(seen[3].data)


def test_untouched_lines_keep_the_hosts_objects(session_path: Path) -> None:
    """When nothing matches, observers still get the written objects, not a re-parse."""
    seen: list[Record] = []
    payload = {"fine": [1, 2]}
    with (
        Session.create(session_path, redact=Redactor(["absent"]), observers=[seen.append]) as s,
        s.begin_run() as run,
    ):
        run.record(Event("note", None, payload))
    assert seen[2].data is payload

"""Sessions as a newcomer's first hour meets them: long, in folders, with failures and odd messages.

``record_folder`` writes a small folder of sessions that holds what tripped
people in the viewer: a run of five hours, sessions in two sub-folders, a
Claude Code failure wrapped in ``<tool_use_error>`` tags, a tool that prints
its newlines escaped, an assistant message that is only whitespace, one that
is only tool calls, a one-line result thousands of characters long, and
Markdown bodies, some of them hostile.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from loopscribe import (
    AssistantMessage,
    Execution,
    Session,
    TextContent,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from loopscribe import events as ev

PROMPT = "Fix the flaky login test in tests/test_auth.py and explain the cause"
LONG_RESULT = "log line " * 2_000
WRAPPED_ERROR = "<tool_use_error>File does not exist.</tool_use_error>"
ESCAPED_ERROR = "Pre-commit validation failed:\\n\\n[FORMAT] Code is not formatted."
MARKDOWN = (
    "## The cause\n\n"
    "The test **races** the session cleanup; see `auth.py` and "
    "[the docs](https://example.org/auth).\n\n"
    "* first item\n* second item\n\n"
    "1. one\n2. two\n\n"
    "> a quote\n\n"
    "```python\nprint('<b>not bold</b>')\n```\n"
)
HOSTILE = (
    "<script>window.__pwned = 1</script>\n\n"
    '<img src=x onerror="window.__pwned = 2">\n\n'
    "[click](javascript:window.__pwned=3) and [data](data:text/html,<script>alert(1)</script>) "
    "and [entity](&#106;avascript:window.__pwned=4) and [vb](vbscript:x)\n\n"
    '<a href="https://evil.example/" onclick="window.__pwned=5">raw link</a>\n\n'
    "![pixel](https://evil.example/track.png) &lt;b&gt;not bold&lt;/b&gt; &amp; "
    '<iframe src="javascript:window.__pwned=6"></iframe>\n\n'
    "**<u>underlined?</u>** [x](<javascript:window.__pwned=7>) "
    '[y](https://ok.example/" onmouseover="window.__pwned=8)'
)


@dataclass(frozen=True)
class Folder:
    """The folder and the sessions in it."""

    root: Path
    long_id: str
    fix_id: str
    fix_run: str
    fix_records: int
    codex_id: str


def _at(t0: datetime, seconds: float) -> datetime:
    return t0 + timedelta(seconds=seconds)


def record_long(path: Path) -> str:
    """One run of 5 h 1 m 9 s by its source's clock (it closes now)."""
    t0 = datetime.now(UTC) - timedelta(seconds=5 * 3600 + 69)
    with Session.create(path, metadata={"title": "five hours"}) as session:
        with session.begin_run(timestamp=t0) as run:
            ex = Execution("model_1", "model")
            run.record(ev.model_exec_start(ex, "gpt-demo", timestamp=t0))
            run.record(
                ev.model_exec_end(
                    ex,
                    message=AssistantMessage((TextContent("done"),), model="gpt-demo"),
                    timestamp=_at(t0, 5 * 3600 + 60),
                )
            )
        return session.id


def record_fix(path: Path) -> tuple[str, str, int]:
    """A Claude-Code-like run: a prompt, calls that fail in odd ways, a long result, Markdown."""
    t0 = datetime.now(UTC) - timedelta(hours=1)
    clock = [0.0]

    def tick(seconds: float = 1.0) -> datetime:
        clock[0] += seconds
        return _at(t0, clock[0])

    with Session.create(path, metadata={"source": "claude-code"}) as session:
        with session.begin_run(timestamp=t0) as run:
            run.record(ev.message_end(None, UserMessage(PROMPT), timestamp=tick()))
            model = Execution("msg_01PdWvcjJ6E9BgscDveYt9YV", "model")
            run.record(ev.model_exec_start(model, "claude-demo", timestamp=tick()))
            blank = {"role": "assistant", "content": [{"type": "text", "text": "\n\n"}]}
            calls_only = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_01ReadCall",
                        "type": "function",
                        "function": {"name": "Read", "arguments": '{"file_path": "auth.py"}'},
                    }
                ],
            }
            run.record(ev.model_exec_end(model, message=calls_only, timestamp=tick()))
            run.record(ev.message_end(model, blank, timestamp=tick()))
            run.record(ev.message_end(model, calls_only, timestamp=tick()))
            for call_id, tool, output, failed in (
                ("toolu_01ReadCall", "Read", WRAPPED_ERROR, True),
                ("toolu_01BashCall", "Bash", ESCAPED_ERROR, True),
                ("toolu_01GrepCall", "Grep", LONG_RESULT, False),
            ):
                tool_ex = Execution(call_id, "tool", parent_id=model.id)
                run.record(ev.tool_exec_start(tool_ex, tool, {"q": tool}, timestamp=tick()))
                result = ToolResultMessage(call_id, tool, (TextContent(output),), is_error=failed)
                run.record(
                    ev.tool_exec_end(tool_ex, tool, result, is_error=failed, timestamp=tick())
                )
                run.record(ev.message_end(tool_ex, result, timestamp=tick()))
            answer = Execution("msg_02Answer", "model")
            run.record(ev.model_exec_start(answer, "claude-demo", timestamp=tick()))
            for text in (MARKDOWN, HOSTILE):
                reply = AssistantMessage(
                    (TextContent(text),), model="claude-demo", usage=Usage(9, 9)
                )
                run.record(ev.message_end(answer, reply, timestamp=tick()))
            run.record(ev.model_exec_end(answer, message=reply, timestamp=tick(600)))
            run.record(ev.message_end(None, UserMessage(HOSTILE), timestamp=tick()))
            run_id = run.id
        records = len(path.read_bytes().splitlines())
        return session.id, run_id, records


def record_folder(root: Path) -> Folder:
    """The folder: ``claude-code/fix.jsonl``, ``codex/long.jsonl`` and ``codex/other.jsonl``."""
    (root / "claude-code").mkdir(parents=True)
    (root / "codex").mkdir()
    fix_id, fix_run, records = record_fix(root / "claude-code" / "fix.jsonl")
    long_id = record_long(root / "codex" / "long.jsonl")
    with Session.create(root / "codex" / "other.jsonl", metadata={"title": "other"}) as s:
        codex_id = s.id
    return Folder(root, long_id, fix_id, fix_run, records, codex_id)


def rect(driver: Any, element: Any) -> dict[str, float]:
    """An element's bounding box on the page."""
    box: dict[str, float] = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width};",
        element,
    )
    return box

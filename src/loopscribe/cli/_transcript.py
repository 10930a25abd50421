"""A session as a terminal transcript: every message, every tool call and its result.

Messages come from ``message_end`` records, in any shape (:mod:`._render`).
Tool calls and results a message does not already hold (an importer records
Claude Code's and Codex's calls as executions, not as message blocks; adapters
do the same) come from ``tool_exec_start`` and ``tool_exec_end``: name, call
ID, arguments, result, and the outcome (an error, or unknown where the
source does not say). Empty messages are left out; reasoning is folded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import events as ev
from .._messages import AssistantMessage, ToolCall, ToolResultMessage
from .._model import Record
from .._reader import read
from ._render import TOOL_CHARS, render_message, shorten

__all__ = ["Entry", "entries", "entry_of", "last_entries"]

_CALL_KEYS = ("id", "call_id")
_RESULT_KEYS = ("tool_use_id", "tool_call_id", "call_id", "toolCallId")


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing said or done: a role heading and its text."""

    seq: int
    role: str
    text: str

    def to_json(self) -> dict[str, Any]:
        """As one JSON object."""
        return {"seq": self.seq, "role": self.role, "text": self.text}


def _ids(value: Any, keys: tuple[str, ...], found: set[str]) -> None:
    """Every string under one of ``keys`` in a message (blocks, tool calls), recursively."""
    if isinstance(value, ToolCall):
        found.add(value.id)
    elif isinstance(value, ToolResultMessage):
        found.add(value.tool_call_id)
    elif isinstance(value, AssistantMessage) and not isinstance(value.content, str):
        for block in value.content:
            _ids(block, keys, found)
    elif isinstance(value, Mapping):
        for key in keys:
            if isinstance(value.get(key), str):
                found.add(value[key])
        for item in value.values():
            if isinstance(item, Mapping | list | tuple):
                _ids(item, keys, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _ids(item, keys, found)


def _in_messages(records: Iterable[Record]) -> tuple[set[str], set[str]]:
    """The call IDs that messages show as calls (assistant) and as results (others)."""
    calls: set[str] = set()
    results: set[str] = set()
    for record in records:
        if record.type != ev.MESSAGE_END:
            continue
        message = record.data.get("message")
        role = render_message(message)[0] if message is not None else ""
        if role == "assistant":
            _ids(message, _CALL_KEYS, calls)
        else:
            _ids(message, _RESULT_KEYS, results)
    return calls, results


def _json(value: Any) -> str:
    import orjson

    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def _result_text(data: Mapping[str, Any]) -> str:
    for key in ("result", "content", "error"):
        value = data.get(key)
        if value not in (None, "", [], {}):
            if key == "error" and isinstance(value, Mapping):
                value = value.get("message") or value
            return _json(value)
    return ""


def entries(path: Path | str) -> Iterator[Entry]:
    """Every message, tool call and tool result of a session file, in record order."""
    calls, results = _in_messages(read(path))
    for record in read(path):
        found = entry_of(record, calls, results)
        if found is not None:
            yield found


def entry_of(
    record: Record, calls: Set[str] = frozenset(), results: Set[str] = frozenset()
) -> Entry | None:
    """What a record says or does, if it is a message, a tool call or a tool result.

    ``calls`` and ``results`` are call IDs messages already show (left out here).
    """
    data = record.data
    ex = record.execution
    if record.type == ev.MESSAGE_END:
        message = data.get("message")
        if message is None:
            return None
        role, text = render_message(message)
        text = text.strip("\n")  # Claude Code's blank text blocks, or text after blank lines
        return Entry(record.seq, role, text) if text.strip() else None
    if record.type == ev.TOOL_EXEC_START and ex is not None and ex.id not in calls:
        attempt = f" attempt {ex.attempt}" if ex.attempt > 1 else ""
        args = shorten(_json(data.get("args", {})), TOOL_CHARS)
        text = f"[tool call {data.get('tool')} {ex.id}{attempt}] {args}".rstrip()
        return Entry(record.seq, "assistant", text)
    if record.type == ev.TOOL_EXEC_END and ex is not None and ex.id not in results:
        flag = data.get("is_error")
        if flag is True or data.get("error") is not None:
            label = "tool error"
        elif flag is None and "is_error" in data:
            label = "tool result, outcome unknown"
        else:
            label = "tool result"
        body = shorten(_result_text(data), TOOL_CHARS)
        return Entry(record.seq, "tool", f"[{label} {data.get('tool')} {ex.id}] {body}".rstrip())
    return None


def last_entries(path: Path | str, last: int) -> tuple[list[Entry], int]:
    """The last ``last`` entries (every one when ``last`` is 0), and how many there are."""
    kept: deque[Entry] = deque(maxlen=last or None)
    total = 0
    for entry in entries(path):
        total += 1
        kept.append(entry)
    return list(kept), total

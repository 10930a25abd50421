"""A session as a conversation: its messages, tool calls, results and errors, in order.

The conversation is read from the records, a page at a time, and every item
keeps its coordinates — record ``seq``, run, execution and the span ID of
its bar — so the page can link each message to its record and to its bar
on the timeline.

Which records speak:

* ``message_end`` — a committed message (loopscribe's typed messages, or the
  OpenAI/Anthropic dicts hosts and importers record);
* ``model_exec_end`` — the reply and its error; the reply only when no
  ``message_end`` committed it (frameworks that do not commit messages);
* ``model_request`` — in a run that commits no messages at all, the new
  user and system messages of each request (what the model was asked);
* ``tool_exec_start`` / ``tool_exec_end`` — the call with its arguments, the
  result, ``is_error`` and the error;
* ``agent_start`` / ``agent_end`` of a subagent — its thread's start and end;
  ``compaction`` and ``context_transform_end`` — a summary note.

Each item says how deep it sits in subagents (``depth``) and which
subagent's thread it belongs to (``thread``), so subagents render as nested
threads. Bodies are clipped like every other preview (see :func:`clip`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from .. import events as ev
from .._preview import error_text
from .._timeline import Bar, RunTimeline, SessionTimeline
from ._clip import BODY_BUDGET_CHARS, STRING_LIMIT_CHARS, Clipped, clip

__all__ = ["CONVERSATION_PAGE", "conversation"]

CONVERSATION_PAGE = 200
"""Items one conversation request returns at most."""
_SCAN_LIMIT = 20_000
"""Records one request reads at most, so a page of a huge run stays quick."""
_INPUT_ROLES = frozenset({"user", "system", "developer", "human"})


def _role(message: Any) -> str | None:
    if not isinstance(message, Mapping):
        return None
    role = message.get("role") or message.get("$ls") or message.get("type")
    return role if isinstance(role, str) else None


class _Threads:
    """Which subagent thread an execution belongs to, and how deep it is."""

    def __init__(self, run: RunTimeline) -> None:
        self.run = run
        self.latest: dict[str, Bar] = {}
        for bar in run.bars.values():
            known = self.latest.get(bar.execution.id)
            if known is None or bar.execution.attempt > known.execution.attempt:
                self.latest[bar.execution.id] = bar
        self.memo: dict[str, tuple[int, str | None, str | None]] = {}

    def of(self, execution_id: str) -> tuple[int, str | None, str | None]:
        """``(depth, thread execution id, thread agent name)`` of an execution."""
        found = self.memo.get(execution_id)
        if found is not None:
            return found
        chain: list[Bar] = []
        seen: set[str] = set()
        current: str | None = execution_id
        while current is not None and current not in seen and len(chain) < 256:
            seen.add(current)
            bar = self.latest.get(current)
            if bar is None:
                break
            chain.append(bar)
            current = bar.execution.parent_id
        # A subagent is an agent execution with a parent (the top-level agent has none).
        agents = [b for b in chain if b.execution.kind == "agent" and b.execution.parent_id]
        depth = len(agents)
        result = (depth, agents[0].execution.id, agents[0].agent) if depth else (0, None, None)
        self.memo[execution_id] = result
        return result


def conversation(
    timeline: SessionTimeline,
    *,
    start: int = 0,
    limit: int = CONVERSATION_PAGE,
    string_limit: int | None = STRING_LIMIT_CHARS,
    budget: int = BODY_BUDGET_CHARS,
) -> dict[str, Any]:
    """One page of a session's conversation, from record ``start`` on.

    Args:
        timeline: The session's folded timeline (its record offsets and bars).
        start: The first record ``seq`` to read.
        limit: Items to return at most.
        string_limit: Longest string kept whole (``None``: keep every body whole).
        budget: String characters kept per item.

    Returns:
        ``items`` (see the module docstring), ``next`` (the ``seq`` to ask
        for the next page, ``None`` at the end) and ``records`` (records in
        the session).
    """
    items: list[dict[str, Any]] = []
    seq = max(0, start)
    total = timeline.records
    threads: dict[str, _Threads] = {}
    scanned = 0
    where = timeline.locate(seq)
    if where is None:
        return {"items": [], "next": None, "records": total}
    with open(timeline.path, "rb") as stream:
        stream.seek(where[0])
        while seq < total and len(items) < limit and scanned < _SCAN_LIMIT:
            offset, size = timeline.locate(seq) or (0, 0)
            stream.seek(offset)
            raw = stream.read(size)
            scanned += 1
            obj = orjson.loads(raw)
            for item in _items(timeline, obj, threads):
                item["offset"] = offset
                body = item.pop("body")
                cut = (
                    Clipped(body)
                    if string_limit is None
                    else clip(body, string_limit=string_limit, budget=budget)
                )
                item["body"] = cut.value
                item["cuts"] = cut.cuts
                items.append(item)
            seq += 1
    return {"items": items, "next": seq if seq < total else None, "records": total}


def _items(
    timeline: SessionTimeline, obj: dict[str, Any], threads: dict[str, _Threads]
) -> list[dict[str, Any]]:
    kind = obj.get("type")
    data = obj.get("data")
    if not isinstance(data, dict) or not isinstance(kind, str):
        return []
    run_id = obj.get("run_id")
    run = timeline.runs.get(run_id) if isinstance(run_id, str) else None
    execution = obj.get("execution") if isinstance(obj.get("execution"), dict) else None
    bar: Bar | None = None
    depth, thread, thread_agent = 0, None, None
    if run is not None and execution is not None:
        key = (str(execution.get("id")), int(execution.get("attempt") or 1))
        bar = run.bars.get(key)
        if run.run_id not in threads:
            threads[run.run_id] = _Threads(run)
        depth, thread, thread_agent = threads[run.run_id].of(key[0])
    base: dict[str, Any] = {
        "seq": obj.get("seq"),
        "ts": obj.get("ts"),
        "type": kind,
        "run_id": run_id,
        "execution": execution,
        "span_id": (
            f"{bar.span_id:016x}"
            if bar is not None
            else None
            if run is None
            else f"{run.span_id:016x}"
        ),
        "depth": depth,
        "thread": thread,
        "thread_agent": thread_agent,
    }

    def item(what: str, body: Any, **extra: Any) -> dict[str, Any]:
        return {**base, "kind": what, "body": body, **extra}

    out: list[dict[str, Any]] = []
    commits = run is None or run.commits
    if kind == ev.MESSAGE_END and data.get("message") is not None:
        message = data["message"]
        out.append(item("message", message, role=_role(message)))
    elif kind == ev.MODEL_REQUEST and not commits:
        messages = data.get("messages")
        if isinstance(messages, list):
            fresh: list[Any] = []
            for message in reversed(messages):
                if _role(message) not in _INPUT_ROLES:
                    break
                fresh.append(message)
            for message in reversed(fresh):
                out.append(item("message", message, role=_role(message)))
    elif kind == ev.MODEL_EXEC_END:
        message = data.get("message") or data.get("partial_message")
        if message is not None and (not commits or bar is None or not bar.committed):
            out.append(item("message", message, role=_role(message) or "assistant"))
        if data.get("error") not in (None, False):
            out.append(item("error", data["error"], error_text=error_text(data)))
    elif kind == ev.TOOL_EXEC_START:
        out.append(
            item(
                "tool_call",
                data.get("args"),
                tool=data.get("tool"),
                call_id=execution and execution.get("id"),
            )
        )
    elif kind == ev.TOOL_EXEC_END:
        result = data.get("result")
        if result is None:
            result = data.get("content")
        failed = bool(data.get("is_error")) or data.get("error") is not None
        out.append(
            item(
                "tool_result",
                result,
                tool=data.get("tool"),
                call_id=execution and execution.get("id"),
                is_error=failed,
                error=data.get("error"),
                error_text=error_text(data) if failed else None,
            )
        )
    elif kind in (ev.AGENT_START, ev.AGENT_END) and execution is not None:
        if execution.get("parent_id") is not None:
            out.append(item("agent", data.get("error"), agent=data.get("agent"), event=kind))
        elif data.get("error") not in (None, False):
            out.append(item("error", data["error"], error_text=error_text(data)))
    elif kind in (ev.COMPACTION, ev.CONTEXT_TRANSFORM_END) and data.get("summary") is not None:
        out.append(item("note", data["summary"], note=kind))
    return out

"""Many small, valid session files written straight in the format: a folder of 100,000 in seconds.

Recording each through :class:`~loopscribe.Session` costs milliseconds (a
lock, an fsync); the viewer's scale tests and ``benchmarks/viewer.py`` need
thousands to 100,000 sessions, so :func:`write_sessions` writes the lines
the recorder would write (keys in the format's order, contiguous ``seq``)
from a template: a titled session, one run, a user message, a model call
with its reply and usage, and a tool call — every third tool call failed.
"""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

__all__ = ["BASE_TIME", "MODELS", "TOOLS", "session_lines", "write_sessions"]

BASE_TIME = datetime(2026, 3, 1, tzinfo=UTC)
"""Session ``i`` starts ``i`` minutes after this: a higher index is a newer session."""
MODELS = ("gpt-demo", "claude-demo", "gemini-demo")
TOOLS = ("grep", "read_file", "web_fetch", "run_tests")


def _ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def session_lines(session_id: str, run_id: str, index: int, *, title: str | None = None) -> bytes:
    """The bytes of session ``index``: 9 records, about 1.3 KB."""
    t = BASE_TIME + timedelta(minutes=index)
    model, tool = MODELS[index % len(MODELS)], TOOLS[index % len(TOOLS)]
    failed = index % 3 == 2
    head = {"session_id": session_id}
    lines: list[dict[str, object]] = []

    def add(kind: str, data: dict[str, object], execution: dict[str, object] | None = None) -> None:
        at = t + timedelta(milliseconds=10 * len(lines))
        line: dict[str, object] = {**head, "seq": len(lines), "type": kind}
        if kind != "session_start":
            line["run_id"] = run_id
        line["ts"] = _ts(at)
        if execution is not None:
            line["execution"] = execution
        line["data"] = data
        lines.append(line)

    meta = {"title": title or f"task {index} with {tool}"}
    add("session_start", {"format_version": 1, "metadata": meta})
    add("run_start", {})
    add(
        "message_end", {"message": {"$ls": "user", "content": f"please run {tool}", "role": "user"}}
    )
    call = {"id": "model_1", "kind": "model", "attempt": 1}
    add("model_exec_start", {"model": model, "provider": "demo"}, call)
    usage = {"$ls": "usage", "input_tokens": 100 + index % 50, "output_tokens": 10}
    reply = {"$ls": "assistant", "content": [{"$ls": "text", "text": "ok"}], "role": "assistant"}
    add("model_exec_end", {"message": {**reply, "model": model}, "usage": usage}, call)
    tool_call = {"id": "call_1", "kind": "tool", "attempt": 1}
    add("tool_exec_start", {"tool": tool, "args": {"n": index}}, tool_call)
    end: dict[str, object] = {"tool": tool, "result": f"result {index}", "is_error": failed}
    if failed:
        end["error"] = {"type": "ToolError", "message": f"failure {index}"}
    add("tool_exec_end", end, tool_call)
    add("run_close", {})
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def write_sessions(
    folder: Path, count: int, *, start: int = 0, per_folder: int | None = None, seed: int = 7
) -> list[str]:
    """Write sessions ``start`` .. ``start + count - 1`` into ``folder``; returns their IDs.

    Args:
        folder: Where (created).
        count: How many.
        start: The index of the first (its time and name): call again with a
            higher ``start`` to add newer sessions.
        per_folder: Spread the files over subfolders of this many (``None``: all in one).
        seed: Session and run IDs are drawn from this seed and ``start``.
    """
    rng = random.Random(seed * 1_000_003 + start)
    ids = []
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(start, start + count):
        sid, rid = rng.randbytes(16).hex(), rng.randbytes(8).hex()
        target = folder if per_folder is None else folder / f"part-{index // per_folder:04d}"
        if per_folder is not None:
            target.mkdir(exist_ok=True)
        path = target / f"s{index:07d}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, session_lines(sid, rid, index))
        finally:
            os.close(fd)
        ids.append(sid)
    return ids

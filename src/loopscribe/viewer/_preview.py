"""One-line previews of record bodies: what a timeline row says about its bar.

A preview is a short plain string taken from a record's parsed JSON — the
prompt a model was sent, the arguments a tool was called with, the text of
a result, the message of an error. It reads loopscribe's own message types
(``{"$ls": "assistant", ...}``) and the plain shapes hosts and importers
record (OpenAI and Anthropic message dicts, tool-use blocks, function
calls), walks at most a bounded number of values, and never keeps more than
:data:`PREVIEW_CHARS` characters, so folding a run with a preview per bar
costs no more memory than its labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["PREVIEW_CHARS", "error_text", "preview", "snippet"]

PREVIEW_CHARS = 160
"""The longest preview kept for a bar."""
_WALK_BUDGET = 400
"""Values looked at per preview: a huge body costs no more than a small one."""
_TEXT_KEYS = ("text", "content", "output", "result", "message", "thinking", "parts")


def _compact(value: Any, limit: int) -> str:
    try:
        raw = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        raw = str(value)
    return raw if len(raw) <= limit else raw[: limit - 1] + "…"


def snippet(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """The readable text of a parsed JSON value, on one line, at most ``limit`` characters.

    Text blocks and message contents give their text; a tool call gives
    ``name(arguments)``; an image or file gives a bracketed tag; any other
    object is shown as compact JSON.
    """
    parts: list[str] = []
    size = 0
    budget = _WALK_BUDGET

    def put(s: str) -> bool:
        nonlocal size
        s = " ".join(s.split())
        if s:
            parts.append(s)
            size += len(s) + 1
        return size < limit

    def walk(v: Any) -> bool:
        nonlocal budget
        budget -= 1
        if budget < 0:
            return False
        if isinstance(v, str):
            return put(v)
        if isinstance(v, list | tuple):
            return all(walk(item) for item in v)
        if not isinstance(v, Mapping):
            return v is None or put(str(v))
        tag = v.get("$ls") or v.get("type")
        if tag in ("tool_call", "tool_use", "function_call"):
            name = v.get("name") or "?"
            args = v.get("arguments", v.get("input"))
            return put(f"{name}({_compact(args, limit) if args not in (None, '') else ''})")
        function = v.get("function")
        if isinstance(function, Mapping):
            return put(f"{function.get('name') or '?'}({function.get('arguments') or ''})")
        if tag in ("image", "image_url", "input_image"):
            return put("[image]")
        if tag in ("file", "document", "input_file"):
            return put(f"[file {v.get('name') or v.get('uri') or v.get('file_id') or ''}]".strip())
        if tag in ("thinking", "reasoning", "redacted_thinking"):
            return True  # reasoning is folded away in the views; a preview skips it
        found = False
        for key in _TEXT_KEYS:
            if key in v and v[key] not in (None, "", [], {}):
                found = True
                if not walk(v[key]):
                    return False
        calls = v.get("tool_calls")
        if isinstance(calls, list):
            found = True
            if not walk(calls):
                return False
        if not found:
            return put(_compact(v, limit))
        return True

    walk(value)
    line = " ".join(parts)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_text(data: Mapping[str, Any]) -> str | None:
    """The message of a record's error (``error``, or the result of an ``is_error`` call)."""
    error = data.get("error")
    if isinstance(error, Mapping):
        for key in ("message", "detail", "error"):
            if isinstance(error.get(key), str) and error[key]:
                return snippet(error[key])
        rest = {k: v for k, v in error.items() if k != "type" and v not in (None, "", [], {})}
        if rest:
            return snippet(rest) or None
    if isinstance(error, str) and error:
        return snippet(error)
    if data.get("is_error") is True:
        return snippet(data.get("result", data.get("output"))) or None
    message = data.get("message")
    if isinstance(message, Mapping) and isinstance(message.get("error_message"), str):
        return snippet(message["error_message"]) or None
    return None


def _last_prompt(messages: Any) -> str | None:
    """The text of the last user (or system) message of a request's history."""
    if not isinstance(messages, list):
        return None
    for message in reversed(messages[-50:]):
        if not isinstance(message, Mapping):
            continue
        role = message.get("role") or message.get("$ls")
        if role in ("user", "system", "human"):
            return snippet(message.get("content")) or None
    return snippet(messages[-1:]) or None


def preview(kind: str, data: Mapping[str, Any]) -> str | None:
    """The preview a record gives its bar, by record type; ``None`` when it has none.

    ``model_request``: the last prompt; ``model_exec_end``: the reply (text
    and tool calls) or the error; ``tool_exec_start``/``tool_invoke_start``:
    the arguments; ``tool_exec_end``: the result or the error; agent and
    turn records: their input or output, when they carry one.
    """
    if kind == "model_request":
        return _last_prompt(data.get("messages"))
    if kind in ("tool_exec_start", "tool_invoke_start"):
        args = data.get("arguments", data.get("args", data.get("input")))
        return None if args is None else snippet(args)
    err = error_text(data)
    if err:
        return err
    for key in ("message", "result", "output", "response", "input", "prompt"):
        value = data.get(key)
        if value not in (None, "", [], {}):
            return snippet(value) or None
    return None

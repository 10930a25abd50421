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

import re
from collections.abc import Mapping
from typing import Any

from .summary import SUMMARY_CHARS
from .summary import summarize as snippet

__all__ = ["PREVIEW_CHARS", "clean_error", "error_text", "preview", "snippet"]

PREVIEW_CHARS = SUMMARY_CHARS
"""The longest preview kept for a bar."""

_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")
_ESCAPED_SPACE = re.compile(r"\\[nrt]")
_SPACES = re.compile(r"\s+")


def clean_error(text: str) -> str:
    """An error's message as one readable line.

    Claude Code wraps a failure in ``<tool_use_error>…</tool_use_error>``, and
    some tools print their newlines escaped (``\\n``): the tags go (their text
    stays) and an escaped newline reads as a space, as a real one does.
    """
    text = _ESCAPED_SPACE.sub(" ", _TAG.sub(" ", text))
    return _SPACES.sub(" ", text).strip()


def _error_snippet(value: Any) -> str:
    # Bounded first (summarize cuts long values), then cleaned.
    return clean_error(snippet(value))


def error_text(data: Mapping[str, Any]) -> str | None:
    """The message of a record's error (``error``, or the result of an ``is_error`` call)."""
    error = data.get("error")
    if isinstance(error, Mapping):
        for key in ("message", "detail", "error"):
            if isinstance(error.get(key), str) and error[key]:
                return _error_snippet(error[key]) or None
        rest = {k: v for k, v in error.items() if k != "type" and v not in (None, "", [], {})}
        if rest:
            return snippet(rest) or None
    if isinstance(error, str) and error:
        return _error_snippet(error) or None
    if data.get("is_error") is True:
        return _error_snippet(data.get("result", data.get("output"))) or None
    message = data.get("message")
    if isinstance(message, Mapping) and isinstance(message.get("error_message"), str):
        return _error_snippet(message["error_message"]) or None
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

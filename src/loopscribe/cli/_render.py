"""Messages as terminal text, whatever shape they were recorded in.

loopscribe's own message types, and the plain JSON shapes hosts and older
files hold: OpenAI chat and Responses items (the Agents SDK, Codex), Anthropic
content blocks (Claude Code), pydantic-ai requests and responses, LangChain
messages. Every message gets a role; a block of unknown shape is shown as
compact JSON under its type, never as ``?``. Reasoning is a marked, shortened
block; signatures and encrypted reasoning are never printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .._messages import (
    AssistantMessage,
    FileContent,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

THINKING_CHARS = 240
"""Reasoning is folded to this many characters."""

TOOL_CHARS = 600
"""Tool arguments and results are cut to this many characters."""

_ROLES = {
    "human": "user",
    "ai": "assistant",
    "AIMessageChunk": "assistant",
    "developer": "system",
    "function_call": "assistant",
    "custom_tool_call": "assistant",
    "local_shell_call": "assistant",
    "web_search_call": "assistant",
    "reasoning": "assistant",
    "function_call_output": "tool",
    "custom_tool_call_output": "tool",
    "local_shell_call_output": "tool",
    "request": "user",
    "response": "assistant",
}


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()}… ({len(text) - limit:,} more characters)"


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def _thinking(text: str) -> str:
    folded = " ".join(text.split())
    return f"[thinking] {shorten(folded, THINKING_CHARS)}" if folded else "[thinking]"


def _call(name: Any, call_id: Any, arguments: Any) -> str:
    ident = f" {call_id}" if call_id else ""
    return f"[tool call {name}{ident}] {shorten(_json(arguments), TOOL_CHARS)}".rstrip()


def _result(name: Any, call_id: Any, output: Any, *, error: bool = False) -> str:
    label = "tool error" if error else "tool result"
    what = " ".join(str(x) for x in (name, call_id) if x)
    head = f"[{label} {what}]" if what else f"[{label}]"
    return f"{head} {shorten(_text_of(output), TOOL_CHARS)}".rstrip()


def _text_of(value: Any) -> str:
    """The readable text of a tool output or content value."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "\n".join(b for b in (_block(item) for item in value) if b)
    if isinstance(value, Mapping | TextContent | ThinkingContent | ToolCall):
        return _block(value)
    return _json(value)


def _block(block: Any) -> str:
    """One content block or part as text."""
    if isinstance(block, str):
        return block
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ThinkingContent):
        return _thinking(block.thinking)
    if isinstance(block, ToolCall):
        return _call(block.name, block.id, block.arguments)
    if isinstance(block, ImageContent):
        return f"[image {block.mime_type}, {len(block.data) * 3 // 4:,} bytes]"
    if isinstance(block, FileContent):
        where = block.uri or (f"file_id {block.file_id}" if block.file_id else "")
        kind = block.modality or "file"
        parts = [p for p in (block.name, where, block.mime_type) if p]
        return f"[{kind} {' '.join(parts)}]".replace(" ]", "]")
    if isinstance(block, Mapping):
        return _mapping_block(block)
    if block is None:
        return ""
    return _json(block)


def _mapping_block(block: Mapping[str, Any]) -> str:
    kind = block.get("type") or block.get("part_kind")
    match kind:
        case "text" | "input_text" | "output_text" | "summary_text" | "text-part":
            return str(block.get("text", block.get("content", "")))
        case "thinking" | "reasoning_text":
            return _thinking(
                str(block.get("thinking", block.get("text", block.get("content", ""))))
            )
        case "redacted_thinking":
            return "[thinking, redacted]"
        case "reasoning":
            summary = block.get("summary") or block.get("content") or []
            text = _text_of(summary) if summary else ""
            if text:
                return _thinking(text).replace("[thinking]", "[reasoning]", 1)
            return "[reasoning, encrypted]" if block.get("encrypted_content") else "[reasoning]"
        case "tool_use" | "server_tool_use":
            return _call(block.get("name"), block.get("id"), block.get("input"))
        case "tool_result":
            return _result(
                None,
                block.get("tool_use_id"),
                block.get("content"),
                error=bool(block.get("is_error")),
            )
        case "function_call" | "custom_tool_call":
            return _call(
                block.get("name"),
                block.get("call_id") or block.get("id"),
                block.get("arguments", block.get("input")),
            )
        case "function_call_output" | "custom_tool_call_output" | "local_shell_call_output":
            return _result(None, block.get("call_id"), block.get("output"))
        case "local_shell_call":
            action = block.get("action") or {}
            command = action.get("command") if isinstance(action, Mapping) else None
            return _call("shell", block.get("call_id"), command or action)
        case "image" | "input_image" | "image_url" | "image-url":
            return "[image]"
        case "file" | "input_file" | "document":
            return f"[file {block.get('filename') or block.get('name') or ''}]".replace(" ]", "]")
        case "system-prompt" | "user-prompt":
            return _text_of(block.get("content"))
        case "tool-call":
            return _call(block.get("tool_name"), block.get("tool_call_id"), block.get("args"))
        case "tool-return" | "builtin-tool-return":
            return _result(block.get("tool_name"), block.get("tool_call_id"), block.get("content"))
        case "retry-prompt":
            return _result(
                block.get("tool_name"), block.get("tool_call_id"), block.get("content"), error=True
            )
        case "message":
            return _text_of(block.get("content"))
    if isinstance(block.get("text"), str):
        return str(block["text"])
    label = f"[{kind}] " if isinstance(kind, str) else ""
    return label + shorten(_json(block), TOOL_CHARS)


def _role(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    if isinstance(role, str) and role:
        return _ROLES.get(role, role)
    kind = message.get("type") or message.get("kind")
    if isinstance(kind, str) and kind:
        return _ROLES.get(kind, kind)
    ident = message.get("id")
    if message.get("lc") == 1 and isinstance(ident, list) and ident:
        name = str(ident[-1]).removesuffix("Chunk").removesuffix("Message").lower()
        return _ROLES.get(name, name) or "message"
    return "message"


def _mapping_message(message: Mapping[str, Any]) -> list[str]:
    if message.get("lc") == 1 and isinstance(message.get("kwargs"), Mapping):
        return _mapping_message(message["kwargs"])  # a serialized LangChain message
    if "parts" in message and isinstance(message["parts"], list):
        return [_block(part) for part in message["parts"]]  # pydantic-ai
    kind = message.get("type")
    if kind not in (None, "message", "human", "ai", "system", "tool", "chat", "function") and (
        "content" not in message or kind in ("reasoning", "function_call", "custom_tool_call")
    ):
        return [_mapping_block(message)]  # a Responses item: function_call, reasoning, ...
    parts: list[str] = []
    content = message.get("content")
    if message.get("role") == "tool" or kind == "tool":
        name = message.get("name") or message.get("tool_name")
        call_id = message.get("tool_call_id")
        return [_result(name, call_id, content, error=message.get("status") == "error")]
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list | tuple):
        parts.extend(_block(b) for b in content)
    elif content is not None:
        parts.append(_block(content))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        parts.insert(0, _thinking(reasoning))
    for call in message.get("tool_calls") or ():
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        if isinstance(function, Mapping):  # OpenAI chat
            parts.append(_call(function.get("name"), call.get("id"), function.get("arguments")))
        else:  # LangChain
            parts.append(_call(call.get("name"), call.get("id"), call.get("args")))
    return parts


def render_message(message: Any) -> tuple[str, str]:
    """(role, text) of a recorded message of any known shape, for a terminal."""
    if isinstance(message, ToolResultMessage):
        body = _result(
            message.tool_name, message.tool_call_id, list(message.content), error=message.is_error
        )
        return "tool", body
    if isinstance(message, SystemMessage):
        return "system", message.content
    if isinstance(message, UserMessage | AssistantMessage):
        content = message.content
        if isinstance(content, str):
            return message.role, content
        parts = [_block(b) for b in content]
        if isinstance(message, AssistantMessage) and message.error_message:
            parts.append(f"[error] {message.error_message}")
        return message.role, _join(parts)
    if isinstance(message, Mapping):
        return _role(message), _join(_mapping_message(message))
    if isinstance(message, Sequence) and not isinstance(message, str | bytes):
        return "message", _join([_block(b) for b in message])
    role = getattr(message, "role", None)
    return (role if isinstance(role, str) and role else type(message).__name__), _block(message)


def _join(parts: list[str]) -> str:
    return "\n".join(p for p in parts if p)

"""What a span carries of an operation, as the convention modules read it, and their shared helpers.

A convention module (``_otel_genai``, ``_openinference``, ``_openllmetry``)
reads a span's attributes and events into one :class:`Found`: the
operation's kind and name, its messages as loopscribe's message types, its
system instructions and tool definitions, its input and output when they
are not messages, what the convention holds beyond those (``kept``, by
attribute key), which attributes and events carried a body (to be removed
from the span), and what was wrong with them (``problems``). Nothing here
keeps state or raises on bad input: a value that is not what the convention
says is kept as it came and named in ``problems``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

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

Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage
Content = TextContent | ImageContent | FileContent | ThinkingContent | ToolCall

ABSENT: Final[Any] = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()
"""A value the span does not carry (``None`` is a value: JSON ``null``)."""

MODEL, TOOL, AGENT, RETRIEVAL, EMBEDDING, OTHER = (
    "model",
    "tool",
    "agent",
    "retrieval",
    "embedding",
    "other",
)
KINDS: Final = frozenset({MODEL, TOOL, AGENT, RETRIEVAL, EMBEDDING, OTHER})
"""The execution kinds a span becomes."""

_SYSTEM_ROLES: Final = frozenset({"system", "developer"})
_USER_ROLES: Final = frozenset({"user", "human"})
_ASSISTANT_ROLES: Final = frozenset({"assistant", "ai", "model", "bot"})
_TOOL_ROLES: Final = frozenset({"tool", "function", "ipython"})
_DATA_URL: Final = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(;[^,]*)?;base64,(.*)", re.DOTALL)


@dataclass(slots=True)
class Found:
    """One operation as a span (or a log record) carries it.

    Attributes:
        kind: One of :data:`KINDS` when the convention says which.
        name: The tool's, agent's or node's name, when the convention gives one.
        inputs: The input messages, when the span carries them.
        outputs: The output messages (the model's reply, or replies).
        system: The system instructions given apart from the messages.
        tools: The tool definitions offered to the model, as
            ``{"type", "name", "description", "parameters"}`` objects.
        input: What went in when it is not messages (a tool's arguments, a
            chain's input, a retrieval's query, the texts to embed).
        output: What came out likewise (a tool's result, documents, vectors).
        kept_in: Convention content beyond the above, on the way in, by
            attribute key (JSON text parsed).
        kept_out: The same on the way out.
        keys: The attributes that carried a body: removed from the span.
        events: The indexes of the span events that carried a body.
        problems: What was wrong with the bodies (malformed JSON, a value
            of the wrong type, an unknown role), one phrase each.
    """

    kind: str | None = None
    name: str | None = None
    inputs: list[Message] | None = None
    outputs: list[Message] | None = None
    system: list[Content] | None = None
    tools: list[Any] | None = None
    input: Any = ABSENT
    output: Any = ABSENT
    kept_in: dict[str, Any] = field(default_factory=dict)
    kept_out: dict[str, Any] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    events: set[int] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    @property
    def has_content(self) -> bool:
        """Whether any attribute or event carried a body."""
        return bool(self.keys or self.events)

    def keep(self, key: str, value: Any, *, out: bool) -> None:
        """Keep a convention's content that is not a message, input or output."""
        (self.kept_out if out else self.kept_in)[key] = value


def json_value(value: Any, key: str, found: Found) -> Any:
    """An attribute value that holds JSON, parsed; a value that does not parse is kept as text.

    Structured values (the SDK's extended attributes: sequences, mappings)
    are taken as they are.
    """
    if isinstance(value, str):
        try:
            return orjson.loads(value)  # plain already: lists, dicts and scalars
        except orjson.JSONDecodeError:
            found.problems.append(f"{key}: not valid JSON (cut by an attribute length limit?)")
            return value
    if isinstance(value, bytes):
        found.problems.append(f"{key}: bytes where JSON text belongs")
        return value
    return plain(value)


def maybe_json(value: Any, mime_type: Any = None) -> Any:
    """A value that may be JSON text (OpenInference's ``*.value``): parsed when it is JSON.

    A value whose mime type says ``application/json`` but does not parse, or
    text that merely looks like JSON, stays text.
    """
    if not isinstance(value, str):
        return plain(value)
    if mime_type is not None and mime_type != "application/json":
        return value
    text = value.lstrip()
    if not text or text[0] not in "[{":
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def json_or_text(value: Any) -> Any:
    """A value that is JSON text by contract (OpenLLMetry's ``json.dumps``), else as it came."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return plain(value)


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def plain(value: Any) -> Any:
    """An attribute value as plain JSON-shaped data: tuples become lists, mappings dicts."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list or kind is tuple:
        return [plain(v) for v in value]
    if kind is dict or isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def text(value: Any) -> str | None:
    """``value`` if it is a non-empty string."""
    return value if isinstance(value, str) and value else None


def unflatten(items: Iterable[tuple[str, Any]]) -> Any:
    """Dotted keys (``0.message.tool_calls.1.tool_call.id``) as nested lists and dicts.

    A segment of digits indexes a list (kept in index order, gaps closed);
    any other segment names a key. A key that is both a value and a prefix
    (``a`` and ``a.b``) keeps the value under ``""``.
    """
    root: dict[str, Any] = {}
    for key, value in items:
        node = root
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {} if child is None else {"": child}
                node[part] = child
            node = child
        last = parts[-1]
        if isinstance(node.get(last), dict):
            node[last][""] = value
        else:
            node[last] = value
    return _lists(root)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_lists(node[k]) for k in sorted(node, key=int)]
    return {k: _lists(v) for k, v in node.items()}


def split_indexed(key: str, prefix: str) -> tuple[int, str] | None:
    """``(i, rest)`` for ``prefix + "{i}." + rest`` (or ``prefix + "{i}"``), else ``None``."""
    tail = key[len(prefix) :]
    index, _, rest = tail.partition(".")
    if not index.isdigit():
        return None
    return int(index), rest


# -- messages in the OpenAI chat shape (OpenInference and OpenLLMetry hold these) --------


def openai_messages(items: Sequence[Any], where: str, found: Found) -> list[Message]:
    """OpenAI-chat-shaped message dicts as loopscribe messages.

    Shapes read: ``{"role", "content": str | [parts], "tool_calls": [...],
    "tool_call_id", "name", "function_call", "refusal"}``. A part or role
    loopscribe has no type for is kept in ``found.kept_*["parts"]`` with its
    position (``where``: ``in`` or ``out``), and the message still counts.
    """
    out: list[Message] = []
    for item in items:
        if isinstance(item, str):
            out.append(UserMessage(item))
            continue
        if not isinstance(item, Mapping):
            found.problems.append(f"{where} message {len(out)}: not an object")
            keep_part(found, where, len(out), None, item)
            continue
        role = str(item.get("role") or ("assistant" if where == "out" else "user")).lower()
        blocks = _openai_blocks(item.get("content"), where, len(out), found)
        refusal = text(item.get("refusal"))
        if refusal is not None:
            blocks.append(TextContent(refusal))
        calls = [_openai_call(c) for c in item.get("tool_calls") or () if isinstance(c, Mapping)]
        function_call = item.get("function_call")
        if isinstance(function_call, Mapping):
            calls.append(_openai_call({"function": function_call}))
        out.append(
            message(
                role,
                blocks,
                calls,
                tool_call_id=text(item.get("tool_call_id")),
                name=text(item.get("name")),
                where=where,
                index=len(out),
                found=found,
            )
        )
    return out


def _openai_call(call: Mapping[str, Any]) -> ToolCall:
    function = call.get("function")
    fn = function if isinstance(function, Mapping) else call
    return tool_call(call.get("id"), fn.get("name"), fn.get("arguments"))


def tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    """A ToolCall from loosely typed parts: arguments as JSON text are parsed."""
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            arguments = {"": arguments}
    if arguments is None:
        arguments = {}
    elif not isinstance(arguments, Mapping):
        # ToolCall holds an object; a call with other arguments keeps them under "".
        arguments = {"": plain(arguments)}
    return ToolCall(
        str(call_id) if call_id is not None else "",
        str(name) if name is not None else "",
        plain(arguments),
    )


def _openai_blocks(content: Any, where: str, index: int, found: Found) -> list[Content]:
    if content is None:
        return []
    if isinstance(content, str):
        if content[:1] == "[":
            # OpenLLMetry writes a list of parts as JSON text.
            parsed = maybe_json(content)
            if isinstance(parsed, list):
                return _openai_blocks(parsed, where, index, found)
        return [TextContent(content)] if content else []
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, list | tuple):
        return [TextContent(orjson.dumps(plain(content), default=str).decode())]
    blocks: list[Content] = []
    for number, part in enumerate(content):
        block = openai_block(part)
        if block is None:
            keep_part(found, where, index, number, part)
        else:
            blocks.append(block)
    return blocks


def openai_block(part: Any) -> Content | None:
    """One OpenAI content part as a loopscribe content block, or ``None`` if there is none."""
    if isinstance(part, str):
        return TextContent(part)
    if not isinstance(part, Mapping):
        return None
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text") or (kind is None and "text" in part):
        value = part.get("text")
        return TextContent(value) if isinstance(value, str) else None
    if kind in ("image_url", "input_image", "image"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, Mapping) else url
        url = url if isinstance(url, str) else part.get("url")
        return media(url, None, "image") if isinstance(url, str) else None
    if kind in ("reasoning", "thinking"):
        value = part.get("text") or part.get("thinking") or part.get("content")
        return ThinkingContent(value) if isinstance(value, str) else None
    return None


def media(url: str, mime_type: str | None, modality: str | None) -> Content:
    """A URL as content: a base64 ``data:`` image inline, anything else by reference."""
    match = _DATA_URL.fullmatch(url)
    if match is not None:
        mime = match[1] or mime_type
        if mime is not None and mime.startswith("image/"):
            return ImageContent(match[3], mime)
        return FileContent(uri=url, mime_type=mime, modality=modality)
    return FileContent(uri=url, mime_type=mime_type, modality=modality)


def keep_part(found: Found, where: str, message: int, part: int | None, value: Any) -> None:
    """Keep a message part (or a whole message) loopscribe has no type for, with its position."""
    kept = found.kept_out if where == "out" else found.kept_in
    entry: dict[str, Any] = {"message": message, "value": plain(value)}
    if part is not None:
        entry["part"] = part
    kept.setdefault("parts", []).append(entry)


def message(
    role: str,
    blocks: list[Content],
    calls: list[ToolCall],
    *,
    tool_call_id: str | None,
    name: str | None,
    where: str,
    index: int,
    found: Found,
) -> Message:
    """One message of ``role`` from its blocks and tool calls."""
    if role in _SYSTEM_ROLES:
        return SystemMessage(_joined(blocks))
    if role in _ASSISTANT_ROLES or (role not in _USER_ROLES | _TOOL_ROLES and calls):
        return AssistantMessage(tuple(blocks) + tuple(calls))
    if role in _TOOL_ROLES:
        return ToolResultMessage(tool_call_id or "", name or "", tuple(blocks))
    if role not in _USER_ROLES:
        found.problems.append(f"{where} message {index}: unknown role {role!r}, kept as a user's")
        kept = found.kept_out if where == "out" else found.kept_in
        kept.setdefault("roles", []).append({"message": index, "role": role})
    only_text = all(isinstance(b, TextContent) for b in blocks)
    if only_text and len(blocks) == 1:
        return UserMessage(blocks[0].text)  # type: ignore[union-attr]
    return UserMessage(tuple(blocks))


def _joined(blocks: list[Content]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextContent))


def tool_definitions(value: Any) -> list[Any]:
    """Tool definitions in any common shape as ``{"type", "name", "description", "parameters"}``.

    A definition that names no tool is kept as it came.
    """
    if isinstance(value, Mapping):
        value = list(value.values())
    if not isinstance(value, list | tuple):
        return [plain(value)]
    out: list[Any] = []
    for tool in value:
        if not isinstance(tool, Mapping):
            out.append(plain(tool))
            continue
        inner = tool.get("function")
        function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
        name = function.get("name")
        if not isinstance(name, str):
            out.append(plain(tool))
            continue
        definition: dict[str, Any] = {"type": str(tool.get("type") or "function"), "name": name}
        if isinstance(function.get("description"), str):
            definition["description"] = function["description"]
        for key in ("parameters", "input_schema", "parameters_json_schema"):
            if function.get(key) is not None:
                definition["parameters"] = plain(function[key])
                break
        out.append(definition)
    return out

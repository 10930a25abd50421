"""The OpenTelemetry GenAI semantic conventions, as their instrumentations emit them.

Read from what the official instrumentations (``opentelemetry-util-genai``
and the instrumentations built on it), pydantic-ai's native
instrumentation and OpenLLMetry's current releases put on spans and log
records:

========================================  =====================================
attribute or event                        becomes
========================================  =====================================
``gen_ai.input.messages``                 input messages (``[{role, parts}]``)
``gen_ai.output.messages``                output messages, ``finish_reason``
``gen_ai.system_instructions``            system instructions (parts)
``gen_ai.tool.definitions``               tool definitions
``gen_ai.tool.call.arguments`` / result   a tool's input / output
``gen_ai.retrieval.query.text`` /         a retrieval's input / output
``gen_ai.retrieval.documents``
``gen_ai.prompt.variable.*``              kept (prompt template variables)
``gen_ai.prompt`` / ``gen_ai.completion``  input / output messages (the 1.26
                                          conventions' JSON, OpenAI shape)
events ``gen_ai.{system,user,assistant,   input messages (one per event)
tool}.message``
event ``gen_ai.choice``                   an output message
events ``gen_ai.content.prompt`` /        input / output messages
``gen_ai.content.completion``
pydantic-ai: ``model_request_parameters``  kept (it repeats the instructions)
``tool_arguments`` / ``tool_response``    a tool's input / output (format 2)
``final_result``,                         kept on the way out
``pydantic_ai.all_messages``
========================================  =====================================

The same messages arrive in a log record's attributes (the
``gen_ai.client.inference.operation.details`` event, as structured values)
or its body (the per-message events), and from a completion hook as
util-genai's dataclasses: :func:`read_log` and :func:`from_hook` map those.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import orjson

from .._messages import (
    AssistantMessage,
    FileContent,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolResultMessage,
    UserMessage,
)
from ._found import (
    AGENT,
    EMBEDDING,
    MODEL,
    OTHER,
    RETRIEVAL,
    TOOL,
    Content,
    Found,
    Message,
    json_value,
    keep_part,
    maybe_json,
    message,
    openai_messages,
    plain,
    text,
    tool_call,
    tool_definitions,
)

INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_RESULT: Final = "gen_ai.tool.call.result"
RETRIEVAL_QUERY: Final = "gen_ai.retrieval.query.text"
RETRIEVAL_DOCUMENTS: Final = "gen_ai.retrieval.documents"
PROMPT: Final = "gen_ai.prompt"
COMPLETION: Final = "gen_ai.completion"
PROMPT_VARIABLE: Final = "gen_ai.prompt.variable."
DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"

MESSAGE_EVENTS: Final = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT: Final = "gen_ai.choice"
PROMPT_EVENT: Final = "gen_ai.content.prompt"
COMPLETION_EVENT: Final = "gen_ai.content.completion"
CONTENT_EVENTS: Final = frozenset({*MESSAGE_EVENTS, CHOICE_EVENT, PROMPT_EVENT, COMPLETION_EVENT})
"""Span events (and log records) that carry a message."""

# Attributes that hold bodies, and what each becomes: (field, side).
_ATTRIBUTES: Final = {
    INPUT_MESSAGES: ("inputs", "in"),
    OUTPUT_MESSAGES: ("outputs", "out"),
    SYSTEM_INSTRUCTIONS: ("system", "in"),
    TOOL_DEFINITIONS: ("tools", "in"),
    TOOL_ARGUMENTS: ("input", "in"),
    TOOL_RESULT: ("output", "out"),
    RETRIEVAL_QUERY: ("input", "in"),
    RETRIEVAL_DOCUMENTS: ("output", "out"),
    PROMPT: ("openai_inputs", "in"),
    COMPLETION: ("openai_outputs", "out"),
    # pydantic-ai's native instrumentation, beside the conventions.
    "tool_arguments": ("input", "in"),
    "tool_response": ("output", "out"),
    "model_request_parameters": ("kept", "in"),
    "final_result": ("kept", "out"),
    "pydantic_ai.all_messages": ("kept_messages", "out"),
    "all_messages_events": ("kept", "out"),
}
CONTENT_KEYS: Final = frozenset(_ATTRIBUTES)
"""Attribute keys that carry a body in this convention (plus ``gen_ai.prompt.variable.*``)."""

OPERATION_KINDS: Final = {
    "chat": MODEL,
    "text_completion": MODEL,
    "generate_content": MODEL,
    "completion": MODEL,
    "embeddings": EMBEDDING,
    "embedding": EMBEDDING,
    "execute_tool": TOOL,
    "invoke_agent": AGENT,
    "create_agent": AGENT,
    "invoke_workflow": OTHER,
    "retrieval": RETRIEVAL,
    "retrieve": RETRIEVAL,
}
"""``gen_ai.operation.name`` values and the execution kind each one is."""


def read(attributes: Mapping[str, Any], events: Sequence[Any], found: Found) -> None:
    """Add what a span carries in this convention to ``found``."""
    for key, value in attributes.items():
        if key in _ATTRIBUTES:
            _take(key, value, found)
        elif key.startswith(PROMPT_VARIABLE):
            found.keys.add(key)
            found.keep(key, value, out=False)
    if found.kind is None:
        operation = attributes.get("gen_ai.operation.name")
        if isinstance(operation, str):
            found.kind = OPERATION_KINDS.get(operation.lower())
    for index, event in enumerate(events):
        name = getattr(event, "name", None)
        if name in CONTENT_EVENTS:
            found.events.add(index)
            _event(name, getattr(event, "attributes", None) or {}, None, found)


def read_log(
    event_name: str | None, attributes: Mapping[str, Any], body: Any, found: Found
) -> None:
    """Add what a log record carries to ``found``: a details event, or one message event.

    The body of a per-message event counts as content; ``found.keys`` gets
    ``""`` for it.
    """
    read(attributes, (), found)
    if event_name in CONTENT_EVENTS:
        found.keys.add("")
        _event(event_name, attributes, body, found)


def _take(key: str, value: Any, found: Found) -> None:
    found.keys.add(key)
    target, side = _ATTRIBUTES[key]
    out = side == "out"
    where = "out" if out else "in"
    if target in ("input", "output", "kept"):
        # Free-form values: JSON text when it is JSON (util-genai keeps a str as it is).
        parsed = maybe_json(value)
        if target == "input":
            found.input = parsed
        elif target == "output":
            found.output = parsed
        else:
            found.keep(key, parsed, out=out)
        return
    if target == "system" and isinstance(value, str) and value.lstrip()[:1] not in ("[", "{"):
        found.system = [TextContent(value)] if value else []
        return
    if target in ("system", "tools") and isinstance(value, str):
        # The same instructions and tools come with every call: read each text once.
        repeated = _repeated(target, value)
        if repeated is not None:
            if target == "system":
                found.system = list(repeated)
            else:
                found.tools = list(repeated)
            return
    parsed = json_value(value, key, found)
    if isinstance(parsed, str | bytes):
        found.keep(key, parsed, out=out)  # not JSON: the body is kept as it came
    elif target == "inputs":
        found.inputs = (found.inputs or []) + _messages(parsed, key, "in", found)
    elif target == "outputs":
        found.outputs = (found.outputs or []) + _messages(parsed, key, "out", found)
    elif target == "openai_inputs":
        found.inputs = (found.inputs or []) + _openai(parsed, key, "in", found)
    elif target == "openai_outputs":
        found.outputs = (found.outputs or []) + _openai(parsed, key, "out", found)
    elif target == "system":
        found.system = _system(parsed, found)
    elif target == "tools":
        found.tools = tool_definitions(parsed)
    else:
        found.keep(key, _messages(parsed, key, where, found), out=out)


@functools.lru_cache(maxsize=64)
def _repeated(target: str, text: str) -> tuple[Any, ...] | None:
    """System instructions or tool definitions read from their JSON text, if they read cleanly."""
    found = Found()
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    result = _system(parsed, found) if target == "system" else tool_definitions(parsed)
    return None if found.problems or found.kept_in else tuple(result)


def _openai(value: Any, key: str, where: str, found: Found) -> list[Message]:
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        found.problems.append(f"{key}: not a list of messages")
        found.keep(key, value, out=where == "out")
        return []
    return openai_messages(value, where, found)


def _messages(value: Any, key: str, where: str, found: Found) -> list[Message]:
    """``[{role, parts, name?, finish_reason?}]`` as loopscribe messages."""
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        found.problems.append(f"{key}: not a list of messages")
        found.keep(key, value, out=where == "out")
        return []
    out: list[Message] = []
    for item in value:
        if not isinstance(item, Mapping):
            found.problems.append(f"{key}: a message is not an object")
            keep_part(found, where, len(out), None, item)
            continue
        if "parts" not in item and ("content" in item or "tool_calls" in item):
            out.extend(openai_messages([item], where, found))  # an OpenAI-shaped message
            continue
        out.extend(_converted(item, where, len(out), found))
    return out


_CONVERTED: dict[bytes, tuple[Message, ...]] = {}
"""Messages converted lately, by their JSON: a conversation's history comes with every call."""
_CONVERTED_MAX: Final = 4096


def _marks(found: Found) -> tuple[int, ...]:
    """How much ``found`` has noted: a conversion that adds nothing here converted cleanly."""
    counts = [len(found.problems)]
    for kept in (found.kept_in, found.kept_out):
        counts.append(len(kept))
        counts.extend(len(kept.get(k, ())) for k in ("parts", "names", "roles"))
    return tuple(counts)


def _converted(item: Mapping[str, Any], where: str, index: int, found: Found) -> list[Message]:
    """``_message``, remembered for a message that converted cleanly (nothing kept, no problem)."""
    if type(item) is not dict:
        return _message(item, where, index, found)
    try:
        key = where.encode() + orjson.dumps(item)
    except (TypeError, orjson.JSONEncodeError):
        return _message(item, where, index, found)
    known = _CONVERTED.get(key)
    if known is not None:
        return list(known)
    before = _marks(found)
    converted = _message(item, where, index, found)
    if _marks(found) == before:
        if len(_CONVERTED) >= _CONVERTED_MAX:
            _CONVERTED.clear()
        _CONVERTED[key] = tuple(converted)
    return converted


def _message(item: Mapping[str, Any], where: str, index: int, found: Found) -> list[Message]:
    role = str(item.get("role") or ("assistant" if where == "out" else "user")).lower()
    blocks: list[Content] = []
    results: list[ToolResultMessage] = []
    calls = []
    parts = item.get("parts")
    if not isinstance(parts, list):
        parts = [] if parts is None else [parts]
    for number, part in enumerate(parts):
        if not isinstance(part, Mapping):
            keep_part(found, where, index, number, part)
            continue
        kind = part.get("type")
        if kind == "tool_call":
            calls.append(tool_call(part.get("id"), part.get("name"), part.get("arguments")))
        elif kind == "tool_call_response":
            results.append(_tool_result(part))
        else:
            block = _block(part)
            if block is None:
                keep_part(found, where, index, number, part)
            else:
                blocks.append(block)
    name = text(item.get("name"))
    if name is not None:
        (found.kept_out if where == "out" else found.kept_in).setdefault("names", []).append(
            {"message": index, "name": name}
        )
    if results and role != "assistant":
        # A tool role message, or a user message holding tool returns (pydantic-ai).
        rest: list[Message] = [UserMessage(tuple(blocks))] if blocks else []
        return [*results, *rest]
    built = message(
        role, blocks, calls, tool_call_id=None, name=name, where=where, index=index, found=found
    )
    reason = text(item.get("finish_reason"))
    if isinstance(built, AssistantMessage) and reason is not None:
        built = dataclasses.replace(built, stop_reason=reason)
    return [built]


def _tool_result(part: Mapping[str, Any]) -> ToolResultMessage:
    response = part.get("response", part.get("result"))
    name = text(part.get("name")) or ""
    call_id = part.get("id")
    call_id = str(call_id) if call_id is not None else ""
    if isinstance(response, str):
        return ToolResultMessage(call_id, name, (TextContent(response),))
    blocks: list[Content] = []
    if isinstance(response, list) and all(isinstance(p, Mapping) for p in response):
        for p in response:
            block = _block(p)
            if block is None:
                break
            blocks.append(block)
        else:
            return ToolResultMessage(call_id, name, tuple(blocks))
    return ToolResultMessage(call_id, name, (), details=plain(response))


def _block(part: Mapping[str, Any]) -> Content | None:
    """A non-tool part (text, reasoning, media) as a content block; ``None`` for the rest."""
    kind = part.get("type")
    if kind == "text":
        value = part.get("content")
        return TextContent(value) if isinstance(value, str) else None
    if kind in ("reasoning", "thinking"):
        value = part.get("content")
        return ThinkingContent(value) if isinstance(value, str) else None
    modality = text(part.get("modality"))
    mime = text(part.get("mime_type"))
    if kind == "uri" and isinstance(part.get("uri"), str):
        return FileContent(uri=part["uri"], mime_type=mime, modality=modality)
    if kind == "file" and isinstance(part.get("file_id"), str):
        return FileContent(file_id=part["file_id"], mime_type=mime, modality=modality)
    if kind == "blob" and (modality == "image" or (mime or "").startswith("image/")):
        data = part.get("content")
        if isinstance(data, bytes):
            data = base64.b64encode(data).decode()
        if isinstance(data, str):
            return ImageContent(data, mime or "image/*")
    return None


def _system(value: Any, found: Found) -> list[Content]:
    if isinstance(value, str):
        return [TextContent(value)] if value else []
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        found.problems.append(f"{SYSTEM_INSTRUCTIONS}: not a list of parts")
        found.keep(SYSTEM_INSTRUCTIONS, value, out=False)
        return []
    blocks: list[Content] = []
    for number, part in enumerate(value):
        block: Content | None = TextContent(part) if isinstance(part, str) else None
        if isinstance(part, Mapping):
            block = _block(part)
        if block is None:
            found.keep(f"{SYSTEM_INSTRUCTIONS}.{number}", plain(part), out=False)
        else:
            blocks.append(block)
    return blocks


# -- events: the older per-message events, on spans or as log records ---------------------


def _event(name: str, attributes: Mapping[str, Any], body: Any, found: Found) -> None:
    payload = body
    if payload is None:
        content = attributes.get("gen_ai.event.content")
        payload = json_value(content, name, found) if content is not None else None
    if payload is None:
        payload = {k: plain(v) for k, v in attributes.items() if not k.startswith("gen_ai.")}
        if name == PROMPT_EVENT:
            payload = json_value(attributes.get(PROMPT), name, found)
        elif name == COMPLETION_EVENT:
            payload = json_value(attributes.get(COMPLETION), name, found)
    payload = plain(payload)
    if name in MESSAGE_EVENTS:
        if isinstance(payload, Mapping):
            payload = {"role": MESSAGE_EVENTS[name], **payload}
        found.inputs = (found.inputs or []) + _openai([payload], name, "in", found)
    elif name == CHOICE_EVENT:
        found.outputs = (found.outputs or []) + _choice(payload, found)
    elif name == PROMPT_EVENT:
        found.inputs = (found.inputs or []) + _openai(payload, name, "in", found)
    else:
        found.outputs = (found.outputs or []) + _openai(payload, name, "out", found)


def _choice(payload: Any, found: Found) -> list[Message]:
    if not isinstance(payload, Mapping):
        found.problems.append(f"{CHOICE_EVENT}: not an object")
        found.keep(CHOICE_EVENT, payload, out=True)
        return []
    inner = payload.get("message")
    item = dict(inner) if isinstance(inner, Mapping) else {}
    if "tool_calls" in payload and "tool_calls" not in item:
        item["tool_calls"] = payload["tool_calls"]
    item.setdefault("role", "assistant")
    messages = openai_messages([item], "out", found)
    reason = text(payload.get("finish_reason"))
    if reason is not None:
        messages = [
            dataclasses.replace(m, stop_reason=reason) if isinstance(m, AssistantMessage) else m
            for m in messages
        ]
    return messages


# -- a completion hook's arguments ---------------------------------------------------------


def _as_json(value: Any) -> Any:
    """util-genai's dataclasses as the conventions' JSON (bytes as base64, enums as values)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    enum_value = getattr(value, "value", None)
    if enum_value is not None and type(value).__module__ != "builtins":
        return enum_value
    return value


def from_hook(
    inputs: Iterable[Any],
    outputs: Iterable[Any],
    system_instruction: Iterable[Any],
    tool_definitions: Iterable[Any] | None,
) -> Found:
    """A completion hook's content (util-genai's message dataclasses) as a :class:`Found`."""
    found = Found()
    for key, items in (
        (INPUT_MESSAGES, inputs),
        (OUTPUT_MESSAGES, outputs),
        (SYSTEM_INSTRUCTIONS, system_instruction),
        (TOOL_DEFINITIONS, tool_definitions),
    ):
        if items:
            _take(key, [_as_json(item) for item in items], found)
    return found

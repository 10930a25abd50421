"""Pure converters between the OpenAI Responses items the Agents SDK uses and loopscribe messages.

:func:`from_items` turns a list of input or output items into loopscribe
messages: user and system (``developer``) messages, one
:class:`~loopscribe.AssistantMessage` for each run of assistant items
(reasoning as :class:`~loopscribe.ThinkingContent`, text, function calls as
:class:`~loopscribe.ToolCall`), and a :class:`~loopscribe.ToolResultMessage`
for each ``function_call_output``. Images and files become
:class:`~loopscribe.ImageContent` (inline base64) or
:class:`~loopscribe.FileContent` references (URL or file id). An item that
holds more than these types can say (hosted tool calls, citations, a
refusal, arguments that are not a JSON object, inline file bytes) is kept as
the SDK's own dict, in place. :func:`to_items` turns messages back into
input items, so ``to_items(from_items(items))`` gives the items again
without the SDK's bookkeeping (item ids and statuses).

Nothing here holds state or touches a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from ..._messages import (
    AssistantMessage,
    Content,
    FileContent,
    ImageContent,
    Message,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

__all__ = [
    "CLIENT_CALLS",
    "assistant_message",
    "from_items",
    "stop_reason_of",
    "to_items",
    "usage_of",
]

Item = Mapping[str, Any]

CLIENT_CALLS = frozenset(
    {
        "function_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "custom_tool_call",
    }
)
"""Output items the SDK executes on the client; hosted calls (web search, ...) run at the
provider. The one list both paths (hooks and trace processor) read the stop reason from."""


def stop_reason_of(output: Iterable[Any]) -> str | None:
    """``tool_calls`` or ``stop``, read from output items (the SDK reports no finish reason)."""
    types = {item.get("type") for item in output if isinstance(item, Mapping)}
    if types & CLIENT_CALLS:
        return "tool_calls"
    if "message" in types:
        return "stop"
    return None


def usage_of(usage: Any) -> Usage | None:
    """The SDK's ``Usage`` as a loopscribe ``Usage``, cached and reasoning tokens too."""
    if usage is None:
        return None
    inputs = getattr(usage, "input_tokens_details", None)
    outputs = getattr(usage, "output_tokens_details", None)
    return Usage(
        input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
        cache_read_tokens=int(getattr(inputs, "cached_tokens", 0) or 0),
        cache_write_tokens=int(getattr(inputs, "cache_write_tokens", 0) or 0),
        reasoning_tokens=int(getattr(outputs, "reasoning_tokens", 0) or 0),
    )


def _image(part: Item) -> Content | None:
    url, file_id = part.get("image_url"), part.get("file_id")
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return ImageContent(data=data, mime_type=head or "image/png")
    if isinstance(url, str) or isinstance(file_id, str):
        return FileContent(
            uri=url if isinstance(url, str) else None,
            file_id=file_id if isinstance(file_id, str) else None,
            modality="image",
        )
    return None


def _part(part: Any) -> Content | None:
    """One input or output content part; ``None`` when loopscribe has no type for it."""
    if isinstance(part, str):
        return TextContent(part)
    if not isinstance(part, Mapping):
        return None
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
        if part.get("annotations") or part.get("logprobs"):
            return None
        return TextContent(part["text"])
    if kind == "input_image" and set(part) <= {"type", "image_url", "file_id", "detail"}:
        if part.get("detail") not in (None, "auto"):
            return None
        return _image(part)
    if kind == "input_file" and not part.get("file_data"):
        url, file_id = part.get("file_url"), part.get("file_id")
        name = part.get("filename")
        if isinstance(url, str) or isinstance(file_id, str):
            return FileContent(
                uri=url if isinstance(url, str) else None,
                file_id=file_id if isinstance(file_id, str) else None,
                name=name if isinstance(name, str) else None,
                modality="document",
            )
    return None


def _parts(content: Any) -> tuple[Content, ...] | None:
    if isinstance(content, str):
        return (TextContent(content),) if content else ()
    if not isinstance(content, list):
        return None
    out: list[Content] = []
    for raw in content:
        part = _part(raw)
        if part is None:
            return None
        out.append(part)
    return tuple(out)


def _arguments(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, str):
        return None
    try:
        parsed = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _assistant_parts(item: Item) -> tuple[Content, ...] | None:
    """The loopscribe content of one assistant-side item, or ``None`` to keep the item."""
    kind = item.get("type")
    if kind == "function_call":
        args = _arguments(item.get("arguments"))
        if args is None or not isinstance(item.get("call_id"), str) or item.get("namespace"):
            return None
        return (ToolCall(id=item["call_id"], name=str(item.get("name")), arguments=args),)
    if kind == "reasoning":
        texts = [s.get("text") for s in item.get("summary") or () if isinstance(s, Mapping)]
        texts += [c.get("text") for c in item.get("content") or () if isinstance(c, Mapping)]
        if item.get("summary") and item.get("content"):
            return None  # both a summary and the raw reasoning: keep the item
        if not all(isinstance(t, str) for t in texts):
            return None
        signature = item.get("encrypted_content")
        return tuple(ThinkingContent(t, signature) for t in texts if isinstance(t, str))
    if (kind in (None, "message")) and item.get("role") == "assistant":
        return _parts(item.get("content"))
    return None


def _is_assistant_side(item: Item) -> bool:
    kind = item.get("type")
    if kind in ("function_call", "reasoning"):
        return True
    return kind in (None, "message") and item.get("role") == "assistant"


def from_items(
    items: Iterable[Any], tool_names: Mapping[str, str] | None = None
) -> list[Message | dict[str, Any]]:
    """Responses input or output items as loopscribe messages.

    Args:
        items: Items as dicts (``model_dump`` of the SDK's pydantic items works).
        tool_names: Tool names by ``call_id`` for outputs whose call is not in ``items``.

    Returns:
        Messages in order; an item loopscribe has no type for stays its dict.
    """
    names = dict(tool_names or {})
    out: list[Message | dict[str, Any]] = []
    pending: list[Content] = []

    def flush() -> None:
        if pending:
            out.append(AssistantMessage(tuple(pending)))
            pending.clear()

    for raw in items:
        if not isinstance(raw, Mapping):
            flush()
            out.append({"value": raw})
            continue
        item: Item = raw
        if _is_assistant_side(item):
            parts = _assistant_parts(item)
            if item.get("type") == "function_call" and isinstance(item.get("call_id"), str):
                names[item["call_id"]] = str(item.get("name"))
            if parts is not None:
                pending.extend(parts)
                continue
        flush()
        out.append(_other(item, names))
    flush()
    return out


def _other(item: Item, names: Mapping[str, str]) -> Message | dict[str, Any]:
    kind, role = item.get("type"), item.get("role")
    if kind == "function_call_output" and isinstance(item.get("call_id"), str):
        output = item.get("output")
        content = _parts(output)
        if content is not None:
            return ToolResultMessage(
                tool_call_id=item["call_id"],
                tool_name=names.get(item["call_id"], ""),
                content=content,
            )
    if kind in (None, "message") and role in ("user", "system", "developer"):
        content = _parts(item.get("content"))
        if content is not None and role == "user":
            simple = len(content) == 1 and isinstance(content[0], TextContent)
            return UserMessage(content[0].text if simple else content)  # type: ignore[union-attr]
        # A developer message stays the SDK's own: SystemMessage would lose its role.
        if content is not None and role == "system" and set(item) <= {"role", "content", "type"}:
            texts = [c.text for c in content if isinstance(c, TextContent)]
            if len(texts) == len(content):
                return SystemMessage("".join(texts))
    return dict(item)


def assistant_message(
    output: Sequence[Any],
    *,
    usage: Usage | None = None,
    response_id: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    stop_reason: str | None = None,
) -> AssistantMessage | list[Message | dict[str, Any]]:
    """A model response's output items as one :class:`~loopscribe.AssistantMessage`.

    When an item must stay the SDK's own (a hosted tool call, a citation),
    the items are returned as :func:`from_items` gives them instead.
    """
    converted = from_items(output)
    content: tuple[Content, ...] = ()
    if converted:
        first = converted[0]
        if len(converted) > 1 or not isinstance(first, AssistantMessage):
            return converted
        content = first.content
    return AssistantMessage(
        content=content,
        model=model,
        provider=provider,
        usage=usage,
        stop_reason=stop_reason,
        response_id=response_id,
    )


def _to_part(part: Content, *, output: bool) -> dict[str, Any]:
    if isinstance(part, TextContent):
        return {"type": "output_text" if output else "input_text", "text": part.text}
    if isinstance(part, ImageContent):
        return {"type": "input_image", "image_url": f"data:{part.mime_type};base64,{part.data}"}
    if isinstance(part, FileContent):
        if part.modality == "image":
            image: dict[str, Any] = {"type": "input_image"}
            if part.uri is not None:
                image["image_url"] = part.uri
            if part.file_id is not None:
                image["file_id"] = part.file_id
            return image
        file: dict[str, Any] = {"type": "input_file"}
        if part.uri is not None:
            file["file_url"] = part.uri
        if part.file_id is not None:
            file["file_id"] = part.file_id
        if part.name is not None:
            file["filename"] = part.name
        return file
    raise TypeError(f"{type(part).__name__} is not message content")


def to_items(messages: Iterable[Message | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """loopscribe messages as Responses input items (the SDK's dicts pass through)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, Mapping):
            items.append(dict(message))
        elif isinstance(message, SystemMessage):
            items.append({"role": "system", "content": message.content})
        elif isinstance(message, UserMessage):
            content = message.content
            items.append(
                {
                    "role": "user",
                    "content": content
                    if isinstance(content, str)
                    else [_to_part(p, output=False) for p in content],
                }
            )
        elif isinstance(message, ToolResultMessage):
            parts = message.content
            simple = len(parts) == 1 and isinstance(parts[0], TextContent)
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": parts[0].text  # type: ignore[union-attr]
                    if simple
                    else [_to_part(p, output=False) for p in parts],
                }
            )
        else:
            items.extend(_assistant_items(message))
    return items


def _assistant_items(message: AssistantMessage) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []

    def flush() -> None:
        if texts:
            items.append({"type": "message", "role": "assistant", "content": list(texts)})
            texts.clear()

    for part in message.content:
        if isinstance(part, ThinkingContent):
            flush()
            reasoning: dict[str, Any] = {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": part.thinking}],
            }
            if part.signature is not None:
                reasoning["encrypted_content"] = part.signature
            items.append(reasoning)
        elif isinstance(part, ToolCall):
            flush()
            items.append(
                {
                    "type": "function_call",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": orjson.dumps(dict(part.arguments)).decode(),
                }
            )
        else:
            texts.append(_to_part(part, output=True))
    flush()
    return items


def from_chat_messages(messages: Iterable[Any]) -> list[Message | dict[str, Any]]:
    """Chat Completions messages (what a generation span holds) as loopscribe messages."""
    out: list[Message | dict[str, Any]] = []
    names: dict[str, str] = {}
    for raw in messages:
        if not isinstance(raw, Mapping):
            out.append({"value": raw})
            continue
        role, content = raw.get("role"), raw.get("content")
        parts = _parts(content) if content is not None else ()
        if role == "assistant" and parts is not None:
            calls: list[Content] = []
            for call in raw.get("tool_calls") or ():
                function = call.get("function") or {} if isinstance(call, Mapping) else {}
                args = _arguments(function.get("arguments"))
                if args is None:
                    break
                names[str(call.get("id"))] = str(function.get("name"))
                calls.append(ToolCall(str(call.get("id")), str(function.get("name")), args))
            else:
                out.append(AssistantMessage((*parts, *calls)))
                continue
        elif role == "tool" and parts is not None:
            call_id = str(raw.get("tool_call_id"))
            out.append(ToolResultMessage(call_id, names.get(call_id, ""), parts))
            continue
        elif role == "user" and parts is not None:
            simple = len(parts) == 1 and isinstance(parts[0], TextContent)
            out.append(UserMessage(parts[0].text if simple else parts))  # type: ignore[union-attr]
            continue
        elif role == "system" and isinstance(content, str):
            out.append(SystemMessage(content))
            continue
        out.append(dict(raw))
    return out

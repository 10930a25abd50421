"""Pure converters between LangChain messages and loopscribe's message types.

:func:`from_langchain` turns a ``BaseMessage`` into a
:class:`~loopscribe.UserMessage`, :class:`~loopscribe.SystemMessage`,
:class:`~loopscribe.AssistantMessage` or :class:`~loopscribe.ToolResultMessage`;
:func:`to_langchain` turns it back. Text, reasoning (``reasoning`` and
Anthropic ``thinking`` blocks), tool calls, images (inline base64 stays an
:class:`~loopscribe.ImageContent`, a URL or a provider file id becomes a
:class:`~loopscribe.FileContent` reference) and files round-trip. Other
message classes (``ChatMessage`` with a custom role, ``FunctionMessage``)
and blocks loopscribe has no type for are kept as the plain dict of
:func:`lower_message`, which :func:`to_langchain` also accepts.

Nothing here holds state or touches a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    ToolMessage,
    messages_from_dict,
)
from langchain_core.messages import SystemMessage as LcSystemMessage

from ..._codec import TAG
from ..._freeze import snapshot_error
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
    "from_langchain",
    "lower_message",
    "provider_name",
    "to_langchain",
    "usage_of",
]

# Kept on a lowered message even when empty: content is the message, type rebuilds it.
_ALWAYS = frozenset({"content", "type"})
_TAG_KEY = f'"{TAG}":'.encode()

# LangChain's ls_provider values (and common class-derived names) mapped to the
# GenAI conventions' well-known provider names.
_PROVIDERS = {
    "openai": "openai",
    "azure": "azure.ai.openai",
    "azure_openai": "azure.ai.openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "bedrock_converse": "aws.bedrock",
    "amazon_bedrock": "aws.bedrock",
    "google_genai": "gcp.gemini",
    "google": "gcp.gemini",
    "google_vertexai": "gcp.vertex_ai",
    "vertexai": "gcp.vertex_ai",
    "groq": "groq",
    "mistral": "mistral_ai",
    "mistralai": "mistral_ai",
    "cohere": "cohere",
    "deepseek": "deepseek",
    "xai": "x_ai",
    "ollama": "ollama",
    "fireworks": "fireworks",
    "together": "together",
    "perplexity": "perplexity",
    "ibm": "ibm.watsonx.ai",
}


def provider_name(ls_provider: str | None) -> str | None:
    """The well-known provider name for LangChain's ``ls_provider`` metadata, if any."""
    if not ls_provider:
        return None
    key = ls_provider.lower().replace("-", "_")
    return _PROVIDERS.get(key, key)


def _unencodable(value: Any) -> dict[str, str]:
    return snapshot_error(value, TypeError("no JSON form"))


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, LcSystemMessage):
        return "system"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, FunctionMessage):
        return "function"
    if isinstance(message, ChatMessage):
        return message.role
    return message.type


def lower_message(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as a plain dict: ``role`` first, then its non-empty fields.

    Used for messages loopscribe has no type for; :func:`to_langchain`
    rebuilds them.
    """
    dumped = message.model_dump(mode="json", fallback=_unencodable, warnings=False)
    out: dict[str, Any] = {"role": _role(message)}
    for key, value in dumped.items():
        if key in _ALWAYS or value not in (None, {}, [], False):
            out[key] = value
    if _TAG_KEY in orjson.dumps(out):
        # Provider metadata that uses the codec's reserved key: diagnose that part alone.
        return cast("dict[str, Any]", _without_tag(out))
    return out


def _without_tag(value: Any) -> Any:
    if isinstance(value, Mapping):
        if TAG in value:
            return snapshot_error(value, ValueError(f"uses the codec's reserved key {TAG!r}"))
        return {k: _without_tag(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_tag(v) for v in value]
    return value


def usage_of(metadata: Mapping[str, Any] | None) -> Usage | None:
    """A :class:`~loopscribe.Usage` from LangChain's ``usage_metadata``."""
    if not isinstance(metadata, Mapping):
        return None
    inputs = metadata.get("input_token_details") or {}
    outputs = metadata.get("output_token_details") or {}
    return Usage(
        input_tokens=int(metadata.get("input_tokens") or 0),
        output_tokens=int(metadata.get("output_tokens") or 0),
        cache_read_tokens=int(inputs.get("cache_read") or 0),
        cache_write_tokens=int(inputs.get("cache_creation") or 0),
        reasoning_tokens=int(outputs.get("reasoning") or 0),
    )


def _image_from_url(url: str, mime_type: str | None = None) -> Content:
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return ImageContent(data=data, mime_type=head or mime_type or "image/png")
    return FileContent(uri=url, mime_type=mime_type, modality="image")


def _block(block: Any) -> Content | None:
    """One LangChain content block as loopscribe content; ``None`` when there is no type for it."""
    if isinstance(block, str):
        return TextContent(block)
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        if set(block) - {"type", "text", "id", "index"}:
            return None  # annotations, citations: keep the original
        return TextContent(block["text"])
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        return ThinkingContent(block["thinking"], block.get("signature"))
    if kind == "reasoning" and isinstance(block.get("reasoning"), str):
        return ThinkingContent(block["reasoning"], block.get("signature"))
    if kind == "image_url":
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        return _image_from_url(url) if isinstance(url, str) else None
    if kind in ("image", "file", "audio", "video"):
        mime = block.get("mime_type")
        modality = "document" if kind == "file" else kind
        data = block.get("base64") or (block.get("data") if block.get("source_type") else None)
        if kind == "image" and isinstance(data, str) and isinstance(mime, str):
            return ImageContent(data=data, mime_type=mime)
        if isinstance(data, str):
            return None  # inline bytes of a file: keep the original
        url, file_id = block.get("url"), block.get("file_id") or block.get("id")
        if isinstance(url, str) or isinstance(file_id, str):
            name = (block.get("extras") or {}).get("filename") or block.get("filename")
            return FileContent(
                uri=url if isinstance(url, str) else None,
                mime_type=mime if isinstance(mime, str) else None,
                name=name if isinstance(name, str) else None,
                file_id=file_id if isinstance(file_id, str) and url is None else None,
                modality=modality,
            )
    return None


def _content(content: str | Sequence[Any]) -> tuple[Content, ...] | None:
    """Message content as loopscribe content, or ``None`` when a block has no loopscribe type."""
    if isinstance(content, str):
        return (TextContent(content),) if content else ()
    out: list[Content] = []
    for raw in content:
        block = _block(raw)
        if block is None:
            return None
        out.append(block)
    return tuple(out)


def _user_content(content: tuple[Content, ...]) -> str | tuple[Content, ...]:
    if len(content) == 1 and isinstance(content[0], TextContent):
        return content[0].text
    return content


def from_langchain(message: BaseMessage) -> Message | dict[str, Any]:
    """A LangChain message as a loopscribe message.

    Falls back to :func:`lower_message`'s plain dict when the message holds
    something loopscribe has no type for (a custom role, a function message,
    citations, inline file bytes, provider fields in ``additional_kwargs``),
    so nothing is lost.
    """
    if isinstance(message, ToolMessage):
        result = _content(message.content)
        if result is None:
            return lower_message(message)
        return ToolResultMessage(
            tool_call_id=message.tool_call_id,
            tool_name=message.name or "",
            content=result,
            is_error=message.status == "error",
            details=message.artifact,
        )
    content = _content(message.content)
    extra = any(v not in (None, {}, [], "") for v in message.additional_kwargs.values())
    if content is None or extra:
        # Blocks or provider fields loopscribe has no type for: keep the original.
        return lower_message(message)
    if isinstance(message, HumanMessage) and not isinstance(message, ChatMessage):
        return UserMessage(_user_content(content))
    if isinstance(message, LcSystemMessage):
        if any(not isinstance(c, TextContent) for c in content):
            return lower_message(message)
        return SystemMessage("".join(c.text for c in content if isinstance(c, TextContent)))
    if isinstance(message, AIMessage):
        calls = tuple(
            ToolCall(id=call.get("id") or "", name=call["name"], arguments=call.get("args") or {})
            for call in message.tool_calls
        )
        if message.invalid_tool_calls:
            return lower_message(message)
        meta = message.response_metadata or {}
        model = meta.get("model_name") or meta.get("model")
        stop = meta.get("finish_reason") or meta.get("stop_reason")
        response_id = meta.get("id")
        return AssistantMessage(
            content=(*content, *calls),
            model=model if isinstance(model, str) else None,
            provider=provider_name(meta.get("model_provider") or meta.get("ls_provider")),
            usage=usage_of(message.usage_metadata),
            stop_reason=stop if isinstance(stop, str) else None,
            response_id=response_id if isinstance(response_id, str) else None,
        )
    return lower_message(message)


def _to_block(part: Content) -> dict[str, Any] | str:
    if isinstance(part, TextContent):
        return {"type": "text", "text": part.text}
    if isinstance(part, ThinkingContent):
        block: dict[str, Any] = {"type": "thinking", "thinking": part.thinking}
        if part.signature is not None:
            block["signature"] = part.signature
        return block
    if isinstance(part, ImageContent):
        return {"type": "image", "base64": part.data, "mime_type": part.mime_type}
    if isinstance(part, FileContent):
        kind = {"document": "file", None: "file"}.get(part.modality, part.modality or "file")
        out: dict[str, Any] = {"type": kind}
        if part.uri is not None:
            out["url"] = part.uri
        if part.file_id is not None:
            out["file_id"] = part.file_id
        if part.mime_type is not None:
            out["mime_type"] = part.mime_type
        if part.name is not None:
            out["extras"] = {"filename": part.name}
        return out
    raise TypeError(f"{type(part).__name__} is not message content")


def _to_content(content: Sequence[Content]) -> str | list[str | dict[str, Any]]:
    if len(content) == 1 and isinstance(content[0], TextContent):
        return content[0].text
    if not content:
        return ""
    return [_to_block(part) for part in content]


def to_langchain(message: Message | Mapping[str, Any]) -> BaseMessage:
    """Rebuild a LangChain message from what :func:`from_langchain` made of it.

    Raises:
        KeyError: a plain-dict message has no ``type``.
        ValueError: ``type`` names no LangChain message class.
    """
    if isinstance(message, Mapping):
        data = {k: v for k, v in message.items() if k != "role"}
        return messages_from_dict([{"type": message["type"], "data": data}])[0]
    if isinstance(message, SystemMessage):
        return LcSystemMessage(message.content)
    if isinstance(message, UserMessage):
        content = message.content
        return HumanMessage(content if isinstance(content, str) else _to_content(content))
    if isinstance(message, ToolResultMessage):
        return ToolMessage(
            content=_to_content(message.content),
            tool_call_id=message.tool_call_id,
            name=message.tool_name or None,
            status="error" if message.is_error else "success",
            artifact=message.details,
        )
    meta: dict[str, Any] = {}
    if message.model is not None:
        meta["model_name"] = message.model
    if message.stop_reason is not None:
        meta["finish_reason"] = message.stop_reason
    if message.response_id is not None:
        meta["id"] = message.response_id
    calls = [
        {"id": c.id, "name": c.name, "args": dict(c.arguments), "type": "tool_call"}
        for c in message.tool_calls
    ]
    body = [c for c in message.content if not isinstance(c, ToolCall)]
    usage = message.usage
    return AIMessage(
        content=_to_content(body),
        tool_calls=calls,
        response_metadata=meta,
        usage_metadata=None
        if usage is None
        else cast(
            Any,
            {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
                "input_token_details": {
                    "cache_read": usage.cache_read_tokens,
                    "cache_creation": usage.cache_write_tokens,
                },
                "output_token_details": {"reasoning": usage.reasoning_tokens},
            },
        ),
    )

"""Pure converters between pydantic-ai messages and loopscribe's message types.

pydantic-ai keeps a conversation as ``ModelRequest`` and ``ModelResponse``
objects made of parts. :func:`from_pydantic_ai` turns one of them into
loopscribe messages: a request gives one message per part (system prompt,
user prompt, tool return, retry feedback), a response one
:class:`~loopscribe.AssistantMessage` (text, thinking, tool calls, images)
with the response's model, provider, usage, finish reason and
``provider_response_id``. :func:`to_pydantic_ai` rebuilds the messages.

What loopscribe has no type for (citations, native tool calls, inline file
bytes other than images) keeps pydantic-ai's own JSON form, as
``ModelMessagesTypeAdapter`` dumps it, in place of the message.

Nothing here holds state or touches a run.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    DocumentUrl,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
    VideoUrl,
    tool_return_ta,
)
from pydantic_ai.usage import RequestUsage

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

__all__ = ["from_pydantic_ai", "provider_name", "to_pydantic_ai", "usage_of"]

# pydantic-ai's provider names mapped to the GenAI conventions' well-known names.
_PROVIDERS = {
    "google-gla": "gcp.gemini",
    "google": "gcp.gemini",
    "gemini": "gcp.gemini",
    "google-vertex": "gcp.vertex_ai",
    "vertexai": "gcp.vertex_ai",
    "bedrock": "aws.bedrock",
    "mistral": "mistral_ai",
    "grok": "x_ai",
    "xai": "x_ai",
    "azure": "azure.ai.openai",
    "huggingface": "hugging_face",
}
_MODALITY = {ImageUrl: "image", AudioUrl: "audio", VideoUrl: "video", DocumentUrl: "document"}


def provider_name(name: str | None) -> str | None:
    """The well-known provider name for pydantic-ai's ``provider_name`` or ``Model.system``."""
    if not name:
        return None
    return _PROVIDERS.get(name, name)


def usage_of(usage: RequestUsage | None) -> Usage | None:
    """A loopscribe :class:`~loopscribe.Usage` from one response's ``RequestUsage``."""
    if usage is None:
        return None
    details = usage.details or {}
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=int(details.get("reasoning_tokens", 0) or 0),
    )


def _dump(message: ModelMessage) -> dict[str, Any]:
    """pydantic-ai's own JSON form of a message (what loopscribe keeps when it must)."""
    try:
        dumped = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    except Exception as exc:  # a part pydantic-ai itself cannot serialize
        return {"role": "unknown", **snapshot_error(message, exc)}
    return {"role": "assistant" if isinstance(message, ModelResponse) else "user", **dumped}


def _user_part(item: UserContent) -> Content | None:
    if isinstance(item, str):
        return TextContent(item)
    if isinstance(item, BinaryContent):
        if item.is_image:
            return ImageContent(base64.b64encode(item.data).decode("ascii"), item.media_type)
        return None
    for cls, modality in _MODALITY.items():
        if isinstance(item, cls):
            return FileContent(uri=item.url, mime_type=item.media_type, modality=modality)
    return None


def _tool_text(content: Any) -> tuple[str, Any]:
    """A tool's return as the text the model reads, and its JSON form when not text."""
    if isinstance(content, str):
        return content, None
    try:
        lowered = tool_return_ta.dump_python(content, mode="json")
    except Exception as exc:
        lowered = snapshot_error(content, exc)
    return json.dumps(lowered, ensure_ascii=False), lowered


def _request_part(part: ModelRequestPart) -> Message | None:
    if isinstance(part, SystemPromptPart):
        return SystemMessage(part.content)
    if isinstance(part, UserPromptPart):
        if isinstance(part.content, str):
            return UserMessage(part.content)
        content = [_user_part(item) for item in part.content]
        if any(c is None for c in content):
            return None
        return UserMessage(tuple(c for c in content if c is not None))
    if isinstance(part, ToolReturnPart):
        text, lowered = _tool_text(part.content)
        return ToolResultMessage(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            content=(TextContent(text),),
            is_error=part.outcome in ("failed", "denied", "retried"),
            details=lowered,
        )
    if isinstance(part, RetryFeedbackPart):
        # Output retry feedback: the model gets it in the user voice, or as a system
        # prompt for pydantic-ai's own "no output" text.
        feedback = part.model_response()
        no_output = part.retry.cause == "no_output"
        return SystemMessage(feedback) if no_output else UserMessage(feedback)
    if isinstance(part, RetryPromptPart):
        feedback = part.model_response()
        if part.tool_name is None:
            return UserMessage(feedback)  # output validation feedback, sent as a user turn
        return ToolResultMessage(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            content=(TextContent(feedback),),
            is_error=True,
        )
    return None


def _response_part(part: ModelResponsePart) -> Content | None:
    if isinstance(part, TextPart):
        plain = not part.citations and not part.provider_details
        return TextContent(part.content) if plain else None
    if isinstance(part, ThinkingPart):
        return ThinkingContent(part.content, part.signature)
    if isinstance(part, ToolCallPart):
        return ToolCall(id=part.tool_call_id, name=part.tool_name, arguments=part.args_as_dict())
    if isinstance(part, FilePart) and part.content.is_image:
        data = base64.b64encode(part.content.data).decode("ascii")
        return ImageContent(data, part.content.media_type)
    return None


def from_pydantic_ai(
    message: ModelMessage, *, instructions: bool = False
) -> list[Message | dict[str, Any]]:
    """One pydantic-ai message as loopscribe messages.

    Args:
        message: A ``ModelRequest`` or ``ModelResponse``.
        instructions: Put a request's ``instructions`` first, as the model
            receives them (a :class:`~loopscribe.SystemMessage`).

    Returns:
        A request's parts as messages, or the response as one
        :class:`~loopscribe.AssistantMessage`; pydantic-ai's JSON form where
        loopscribe has no type for what it holds.
    """
    if isinstance(message, ModelResponse):
        parts = [_response_part(p) for p in message.parts]
        if any(p is None for p in parts):
            return [_dump(message)]
        return [
            AssistantMessage(
                content=tuple(p for p in parts if p is not None),
                model=message.model_name,
                provider=provider_name(message.provider_name),
                usage=usage_of(message.usage),
                stop_reason=message.finish_reason,
                response_id=message.provider_response_id,
            )
        ]
    out: list[Message | dict[str, Any]] = []
    if instructions and message.instructions:
        out.append(SystemMessage(message.instructions))
    for part in message.parts:
        converted = _request_part(part)
        if converted is None:
            return [*out, _dump(ModelRequest(parts=[part]))]
        out.append(converted)
    return out


def _user_content(content: str | tuple[Content, ...]) -> str | list[UserContent]:
    if isinstance(content, str):
        return content
    out: list[UserContent] = []
    for part in content:
        if isinstance(part, TextContent):
            out.append(part.text)
        elif isinstance(part, ImageContent):
            out.append(BinaryContent(base64.b64decode(part.data), media_type=part.mime_type))
        elif isinstance(part, FileContent) and part.uri is not None:
            cls = {v: k for k, v in _MODALITY.items()}.get(part.modality or "", DocumentUrl)
            out.append(cls(url=part.uri, media_type=part.mime_type))
        else:
            raise TypeError(f"{type(part).__name__} cannot be sent in a user prompt")
    return out


def _response(message: AssistantMessage) -> ModelResponse:
    parts: list[ModelResponsePart] = []
    for part in message.content:
        if isinstance(part, TextContent):
            parts.append(TextPart(part.text))
        elif isinstance(part, ThinkingContent):
            parts.append(ThinkingPart(part.thinking, signature=part.signature))
        elif isinstance(part, ToolCall):
            parts.append(ToolCallPart(part.name, dict(part.arguments), tool_call_id=part.id))
        elif isinstance(part, ImageContent):
            data = base64.b64decode(part.data)
            parts.append(FilePart(BinaryContent(data, media_type=part.mime_type)))
        else:
            raise TypeError(f"{type(part).__name__} cannot be part of a model response")
    usage = message.usage
    return ModelResponse(
        parts=parts,
        model_name=message.model,
        provider_name=message.provider,
        usage=RequestUsage()
        if usage is None
        else RequestUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            details={"reasoning_tokens": usage.reasoning_tokens} if usage.reasoning_tokens else {},
        ),
        finish_reason=message.stop_reason,  # type: ignore[arg-type]
        provider_response_id=message.response_id,
    )


def to_pydantic_ai(messages: Iterable[Message | dict[str, Any]]) -> list[ModelMessage]:
    """loopscribe messages as pydantic-ai messages: request parts grouped, responses apart.

    Raises:
        TypeError: a message holds content pydantic-ai cannot carry there.
    """
    out: list[ModelMessage] = []
    pending: list[ModelRequestPart] = []

    def flush() -> None:
        if pending:
            out.append(ModelRequest(parts=list(pending)))
            pending.clear()

    for message in messages:
        if isinstance(message, dict):
            flush()
            data = {k: v for k, v in message.items() if k != "role"}
            out.extend(ModelMessagesTypeAdapter.validate_python([data]))
        elif isinstance(message, AssistantMessage):
            flush()
            out.append(_response(message))
        elif isinstance(message, SystemMessage):
            pending.append(SystemPromptPart(message.content))
        elif isinstance(message, UserMessage):
            pending.append(UserPromptPart(_user_content(message.content)))
        else:
            pending.append(_tool_return(message))
    flush()
    return out


def _tool_return(message: ToolResultMessage) -> ModelRequestPart:
    text = "".join(c.text for c in message.content if isinstance(c, TextContent))
    if message.is_error and message.details is None:
        return RetryPromptPart(text, tool_name=message.tool_name, tool_call_id=message.tool_call_id)
    content = message.details if message.details is not None else text
    return ToolReturnPart(
        message.tool_name,
        content,
        tool_call_id=message.tool_call_id,
        outcome="failed" if message.is_error else "success",
    )


def from_history(messages: Sequence[ModelMessage]) -> list[Message | dict[str, Any]]:
    """A whole history as loopscribe messages, in order."""
    return [m for message in messages for m in from_pydantic_ai(message)]

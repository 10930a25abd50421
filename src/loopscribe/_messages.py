"""Built-in message and content types, known to every Codec.

Plain JSON (dicts in the OpenAI or Anthropic shape) is always accepted as a
message too; these types exist for hosts that want typed messages and for
the reference loop and executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class TextContent:
    """A block of text."""

    text: str


@dataclass(frozen=True, slots=True)
class ImageContent:
    """An image, base64-encoded."""

    data: str
    mime_type: str


@dataclass(frozen=True, slots=True)
class FileContent:
    """A file or media part kept by reference: where it is, never its bytes.

    ``uri`` names the file (``file://``, ``https://``, an artifact path, or a
    provider's file id as ``file_id``); ``modality`` is ``image``, ``audio``,
    ``video`` or ``document`` when known.
    """

    uri: str | None = None
    mime_type: str | None = None
    name: str | None = None
    file_id: str | None = None
    modality: str | None = None


@dataclass(frozen=True, slots=True)
class ThinkingContent:
    """Model reasoning text, with the provider's signature when it gives one."""

    thinking: str
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call requested by the model."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


Content = TextContent | ImageContent | FileContent | ThinkingContent | ToolCall


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by a provider for one model call.

    ``input_tokens`` counts every prompt token, cached ones included (as the
    OpenTelemetry GenAI conventions do); ``cache_read_tokens`` and
    ``cache_write_tokens`` say how many of them came from or went to a
    prompt cache. Providers that report cached tokens apart (Anthropic) must
    be added up when building a ``Usage``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """Output tokens spent on reasoning (already counted in ``output_tokens``)."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class SystemMessage:
    """Instructions for the model."""

    content: str
    role: Literal["system"] = "system"


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A message from the user."""

    content: str | tuple[Content, ...]
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """A model response: text, reasoning and tool calls, with the call's metadata.

    ``model`` is the model that answered (the response model), ``provider``
    a well-known provider name (``openai``, ``anthropic``, ...),
    ``response_id`` the provider's id for this response.
    """

    content: tuple[Content, ...] = ()
    model: str | None = None
    provider: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None
    error_message: str | None = None
    response_id: str | None = None
    role: Literal["assistant"] = "assistant"

    @property
    def text(self) -> str:
        """The concatenated text blocks."""
        return "".join(c.text for c in self.content if isinstance(c, TextContent))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls, in order."""
        return tuple(c for c in self.content if isinstance(c, ToolCall))


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    """The result of one tool call, as it is given back to the model."""

    tool_call_id: str
    tool_name: str
    content: tuple[Content, ...] = ()
    is_error: bool = False
    details: Any = None
    role: Literal["tool"] = "tool"


Message = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage

BUILTIN_TYPES: tuple[type[Any], ...] = (
    TextContent,
    ImageContent,
    FileContent,
    ThinkingContent,
    ToolCall,
    Usage,
    SystemMessage,
    UserMessage,
    AssistantMessage,
    ToolResultMessage,
)

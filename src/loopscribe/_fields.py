"""Reading labels from record data, whatever shape it has.

Live observers see typed objects (``AssistantMessage``, ``Usage``) and
``orjson.Fragment`` config; a replay sees the same fields as raw JSON; hosts
record plain dicts in OpenAI, Anthropic or Gemini shapes. These helpers read
a field by name from any of them, so the bridge and the workspace summaries
agree on what a record says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

_SCALARS = (str, bytes, int, float, bool, list, tuple)


def plain(value: Any) -> Any:
    """The value itself, or the parsed JSON of an ``orjson.Fragment``."""
    if isinstance(value, orjson.Fragment):
        # Pre-encoded JSON: what replay will see once it is parsed from the file.
        try:
            return orjson.loads(orjson.dumps(value))
        except orjson.JSONDecodeError:
            return None
    return value


def field(obj: Any, name: str) -> Any:
    """A field of a dataclass/object or a key of a mapping; ``None`` when absent."""
    if obj is None or isinstance(obj, _SCALARS):
        return None
    if isinstance(obj, Mapping):
        value = obj.get(name)
    else:
        try:
            value = getattr(obj, name, None)
        except Exception:
            return None
    return plain(value)


def text(value: Any) -> str | None:
    """A non-empty string, else ``None``."""
    return value if isinstance(value, str) and value else None


def count(value: Any) -> int | None:
    """A non-negative int (not a bool), else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Token counts of one model call; ``None`` where the provider gave none."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read: int | None = None
    cache_creation: int | None = None
    reasoning: int | None = None


def token_usage(usage: Any) -> TokenUsage | None:
    """Token counts from loopscribe's Usage, OpenAI, Anthropic or Gemini shapes."""
    if usage is None:
        return None
    inp = count(field(usage, "input_tokens"))
    if inp is None:
        inp = count(field(usage, "prompt_tokens"))
    if inp is None:
        inp = count(field(usage, "prompt_token_count"))
    out = count(field(usage, "output_tokens"))
    if out is None:
        out = count(field(usage, "completion_tokens"))
    if out is None:
        out = count(field(usage, "candidates_token_count"))
    cache_read = count(field(usage, "cache_read_tokens"))
    cache_creation = count(field(usage, "cache_write_tokens"))
    anthropic_read = count(field(usage, "cache_read_input_tokens"))
    anthropic_creation = count(field(usage, "cache_creation_input_tokens"))
    if anthropic_read is not None or anthropic_creation is not None:
        # Anthropic counts cached prompt tokens apart from input_tokens; the
        # conventions' input_tokens includes them.
        cache_read, cache_creation = anthropic_read, anthropic_creation
        if inp is not None:
            inp += (anthropic_read or 0) + (anthropic_creation or 0)
    if cache_read is None:
        details = field(usage, "prompt_tokens_details") or field(usage, "input_tokens_details")
        cache_read = count(field(details, "cached_tokens"))
    reasoning = count(field(usage, "reasoning_tokens"))
    if reasoning is None:
        details = field(usage, "completion_tokens_details") or field(usage, "output_tokens_details")
        reasoning = count(field(details, "reasoning_tokens"))
    if reasoning is None:
        reasoning = count(field(usage, "thoughts_token_count"))
    if (inp, out, cache_read, cache_creation, reasoning) == (None,) * 5:
        return None
    return TokenUsage(inp, out, cache_read, cache_creation, reasoning)


@dataclass(frozen=True, slots=True)
class ResponseLabels:
    """What a ``model_exec_end`` record says about the response, never its body."""

    message: Any
    model: str | None
    provider: str | None
    usage: TokenUsage | None
    response_id: str | None = None


def response_labels(data: Mapping[str, Any]) -> ResponseLabels:
    """The response's model, provider and usage, from the record or its (partial) message."""
    message = plain(data.get("message"))
    if message is None:
        message = plain(data.get("partial_message"))
    usage = token_usage(plain(data.get("usage")))
    return ResponseLabels(
        message,
        text(plain(data.get("model"))) or text(field(message, "model")),
        text(plain(data.get("provider"))) or text(field(message, "provider")),
        usage if usage is not None else token_usage(field(message, "usage")),
        text(plain(data.get("response_id"))) or text(field(message, "response_id")),
    )

"""What every SDK's mapping shares: loose readers of JSON bodies, tool calls, usage,
request parts and outcomes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from .._messages import AssistantMessage, ToolCall, Usage
from ._body import Outcome, RequestParts


def get(obj: Any, key: str) -> Any:
    """``obj[key]`` when ``obj`` is a mapping, else ``None``."""
    return obj.get(key) if isinstance(obj, Mapping) else None


def string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def arguments(raw: Any) -> dict[str, Any]:
    """Tool call arguments: JSON text parsed; text that is not a JSON object kept under ``""``."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if raw is None:
        return {}
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"": raw}
        return parsed if isinstance(parsed, dict) else {"": parsed}
    return {"": raw}


def tool_call(call_id: Any, name: Any, raw: Any) -> ToolCall:
    return ToolCall(str(call_id or ""), str(name or ""), arguments(raw))


def usage(
    input_tokens: Any,
    output_tokens: Any,
    *,
    cache_read: Any = 0,
    cache_write: Any = 0,
    reasoning: Any = 0,
) -> Usage:
    return Usage(
        count(input_tokens),
        count(output_tokens),
        cache_read_tokens=count(cache_read),
        cache_write_tokens=count(cache_write),
        reasoning_tokens=count(reasoning),
    )


def split_body(body: Any, taken: tuple[str, ...]) -> dict[str, Any]:
    """The body's parameters other than ``taken`` (the request's config)."""
    if not isinstance(body, Mapping):
        return {}
    return {k: v for k, v in body.items() if k not in taken}


def request_parts(body: Any, messages_key: str = "messages") -> RequestParts:
    """A request body's model, messages (under ``messages_key``), tools, stream flag, and
    everything else as its config."""
    messages = get(body, messages_key)
    tools = get(body, "tools")
    return RequestParts(
        model=string(get(body, "model")) or "",
        messages=list(messages) if isinstance(messages, list) else [],
        tools=list(tools) if isinstance(tools, list) else [],
        config=split_body(body, ("model", messages_key, "tools")),
        stream=get(body, "stream") is True,
    )


def replied(
    content: list[Any],
    *,
    provider: str,
    model: str | None,
    usage: Usage | None,
    stop_reason: str | None,
    response_id: str | None,
    **rest: Any,
) -> Outcome:
    """An outcome whose message and whose own fields name the same model, usage, stop
    reason and response id; ``rest`` as for :class:`Outcome`."""
    message = AssistantMessage(
        tuple(content),
        model=model,
        provider=provider,
        usage=usage,
        stop_reason=stop_reason,
        response_id=response_id,
    )
    return Outcome(
        message,
        usage=usage,
        model=model,
        stop_reason=stop_reason,
        response_id=response_id,
        **rest,
    )

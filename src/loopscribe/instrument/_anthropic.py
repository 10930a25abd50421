"""Anthropic: the Messages API, read from the bodies the SDK sends and gets.

The request is recorded as the SDK built it: ``messages`` and ``tools`` as
sent, ``system`` and every other parameter as the config. The response
becomes an :class:`~loopscribe.AssistantMessage`: text, extended thinking
(with its signature) and tool use; usage counts every prompt token
(``input_tokens`` plus the cache reads and writes Anthropic reports apart),
with the cache reads and writes beside. Blocks loopscribe has no type for
(``redacted_thinking``, server tool use and results, ...) and the service
tier are kept under ``response``. Streams are assembled from their events,
the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from .._executor import TextDelta, ThinkingDelta
from .._messages import TextContent, ThinkingContent
from . import _http
from ._body import Endpoint, Outcome, RequestParts
from ._patch import Instrumentation
from ._readers import count, get, replied, request_parts, string, tool_call, usage

PROVIDER = "anthropic"


def _usage(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        return None
    read = count(raw.get("cache_read_input_tokens"))
    write = count(raw.get("cache_creation_input_tokens"))
    return usage(
        count(raw.get("input_tokens")) + read + write,
        raw.get("output_tokens"),
        cache_read=read,
        cache_write=write,
    )


def _error(body: Any) -> dict[str, Any] | None:
    inner = get(body, "error")
    if not isinstance(inner, Mapping):
        return None
    return {
        "type": string(inner.get("type")) or "error",
        "message": string(inner.get("message")) or "",
        "body": dict(inner),
    }


class Messages:
    """``POST /v1/messages``."""

    provider = PROVIDER

    def request(self, body: Any) -> RequestParts:
        return request_parts(body)

    def response(self, body: Any) -> Outcome:
        content: list[Any] = []
        extra: dict[str, Any] = {}
        for index, block in enumerate(get(body, "content") or ()):
            kind = get(block, "type")
            if kind == "text" and isinstance(get(block, "text"), str):
                content.append(TextContent(block["text"]))
                if get(block, "citations"):
                    extra.setdefault("citations", []).append(
                        {"index": index, "citations": block["citations"]}
                    )
            elif kind == "thinking" and isinstance(get(block, "thinking"), str):
                content.append(ThinkingContent(block["thinking"], string(get(block, "signature"))))
            elif kind == "tool_use":
                content.append(tool_call(get(block, "id"), get(block, "name"), get(block, "input")))
            else:
                extra.setdefault("blocks", []).append({"index": index, "block": block})
        raw_usage = get(body, "usage")
        tier = get(raw_usage, "service_tier")
        if tier is not None:
            extra["service_tier"] = tier
        if get(body, "stop_sequence") is not None:
            extra["stop_sequence"] = body["stop_sequence"]
        if get(body, "container") is not None:
            extra["container"] = body["container"]
        if get(body, "type") not in ("message", None):
            extra["body"] = body
        model = string(get(body, "model"))
        response_id = string(get(body, "id"))
        use = _usage(raw_usage)
        stop = string(get(body, "stop_reason"))
        return replied(
            content,
            provider=PROVIDER,
            model=model,
            usage=use,
            stop_reason=stop,
            response_id=response_id,
            extra=extra,
            error=_error(body),
        )

    def assembler(self) -> MessagesStream:
        return MessagesStream(self)


class MessagesStream:
    """A Messages stream: ``message_start``, content blocks and their deltas, ``message_stop``."""

    def __init__(self, endpoint: Messages) -> None:
        self._endpoint = endpoint
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._done = False
        self._error: Any = None

    def feed(self, event: str | None, data: str) -> Any:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        kind = get(payload, "type") or event
        index = count(get(payload, "index"))
        if kind == "message_start":
            message = get(payload, "message")
            if isinstance(message, Mapping):
                self._message = {k: v for k, v in message.items() if k != "content"}
                self._usage.update(get(message, "usage") or {})
        elif kind == "content_block_start":
            block = get(payload, "content_block")
            self._blocks[index] = dict(block) if isinstance(block, Mapping) else {"type": None}
        elif kind == "content_block_delta":
            return self._delta(index, get(payload, "delta"))
        elif kind == "message_delta":
            delta = get(payload, "delta")
            if isinstance(delta, Mapping):
                self._message.update({k: v for k, v in delta.items() if v is not None})
            self._usage.update(
                {k: v for k, v in (get(payload, "usage") or {}).items() if v is not None}
            )
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            self._error = payload
        return None

    def _delta(self, index: int, delta: Any) -> Any:
        block = self._blocks.setdefault(index, {"type": None})
        kind = get(delta, "type")
        if kind == "text_delta":
            piece = string(get(delta, "text")) or ""
            block["text"] = str(block.get("text") or "") + piece
            return TextDelta(piece)
        if kind == "thinking_delta":
            piece = string(get(delta, "thinking")) or ""
            block["thinking"] = str(block.get("thinking") or "") + piece
            return ThinkingDelta(piece)
        if kind == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + (
                string(get(delta, "signature")) or ""
            )
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(string(get(delta, "partial_json")) or "")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(get(delta, "citation"))
        else:
            block.setdefault("unknown_deltas", []).append(delta)
        return None

    def outcome(self) -> Outcome:
        blocks: list[Any] = []
        for index, block in sorted(self._blocks.items()):
            if index not in self._json:
                blocks.append(block)
                continue
            text = "".join(self._json[index])
            try:
                blocks.append({**block, "input": orjson.loads(text) if text else {}})
            except orjson.JSONDecodeError:
                blocks.append({**block, "input": text})  # cut mid-arguments: kept as text
        body = {**self._message, "content": blocks, "usage": self._usage}
        outcome = self._endpoint.response(body)
        outcome.complete = self._done
        if self._error is not None:
            outcome.error = _error(self._error) or {"type": "StreamError", "message": ""}
        return outcome


_MESSAGES = Messages()


def endpoint_of(options: Any) -> Endpoint | None:
    """The endpoint a request's options name, if loopscribe records it."""
    url = getattr(options, "url", None)
    if getattr(options, "method", "post").lower() != "post" or not isinstance(url, str):
        return None
    if url.split("?", 1)[0].rstrip("/").endswith("/messages"):
        return _MESSAGES
    return None


_SCOPE = _http.sdk_request(endpoint_of)
_patched: list[Instrumentation] = []
"""The SDK-wide patch, while it is in place."""


def instrument(client: Any = None) -> Instrumentation:
    """Record the Messages calls of every Anthropic client (or of ``client`` alone)."""
    from anthropic import _base_client

    return _http.instrument_stainless(PROVIDER, _base_client, _SCOPE, _patched, client)

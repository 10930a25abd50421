"""OpenAI: Chat Completions and the Responses API, read from the bodies the SDK sends and gets.

The request is recorded as the SDK built it: ``messages`` (Chat Completions)
or ``input`` (Responses; a string input as one user message) as sent, the
tool declarations as sent, every other parameter as the config. The
response becomes an :class:`~loopscribe.AssistantMessage` (text, reasoning,
refusal, tool calls) with usage (cached and reasoning tokens), the finish
reason and the response id; the service tier, system fingerprint and what
loopscribe has no type for are kept under ``response``. The Responses
API's ``previous_response_id`` and the new response's id are the call's
provider state.
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

PROVIDER = "openai"


def _chat_usage(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        return None
    return usage(
        raw.get("prompt_tokens"),
        raw.get("completion_tokens"),
        cache_read=get(raw.get("prompt_tokens_details"), "cached_tokens"),
        reasoning=get(raw.get("completion_tokens_details"), "reasoning_tokens"),
    )


_CHAT_MESSAGE_KEYS = frozenset(
    {"role", "content", "refusal", "tool_calls", "function_call", "reasoning_content", "reasoning"}
)


class Chat:
    """``POST /chat/completions``."""

    provider = PROVIDER

    def request(self, body: Any) -> RequestParts:
        return request_parts(body)

    def response(self, body: Any) -> Outcome:
        choices = get(body, "choices")
        choices = choices if isinstance(choices, list) else []
        first = choices[0] if choices else None
        message = get(first, "message")
        extra: dict[str, Any] = {}
        content: list[Any] = []
        reasoning = string(get(message, "reasoning_content")) or string(get(message, "reasoning"))
        if reasoning:
            content.append(ThinkingContent(reasoning))
        text = get(message, "content")
        if isinstance(text, str) and text:
            content.append(TextContent(text))
        elif isinstance(text, list):
            for part in text:
                part_text = get(part, "text")
                if isinstance(part_text, str):
                    content.append(TextContent(part_text))
                else:
                    extra.setdefault("parts", []).append(part)
        refusal = string(get(message, "refusal"))
        if refusal:
            content.append(TextContent(refusal))
            extra["refusal"] = refusal
        for call in get(message, "tool_calls") or ():
            function = get(call, "function")
            if isinstance(function, Mapping):
                content.append(
                    tool_call(get(call, "id"), function.get("name"), function.get("arguments"))
                )
            else:
                extra.setdefault("tool_calls", []).append(call)
        legacy = get(message, "function_call")
        if isinstance(legacy, Mapping):
            content.append(tool_call("", legacy.get("name"), legacy.get("arguments")))
        if isinstance(message, Mapping):
            rest = {
                k: v for k, v in message.items() if k not in _CHAT_MESSAGE_KEYS and v is not None
            }
            if rest:
                extra["message"] = rest
        elif first is not None or not choices:
            extra["body"] = body
        for key in ("service_tier", "system_fingerprint"):
            if get(body, key) is not None:
                extra[key] = body[key]
        if len(choices) > 1:
            extra["choices"] = choices[1:]
        if get(first, "logprobs") is not None:
            extra["logprobs"] = get(first, "logprobs")
        model = string(get(body, "model"))
        response_id = string(get(body, "id"))
        use = _chat_usage(get(body, "usage"))
        stop = string(get(first, "finish_reason"))
        error = None
        if isinstance(get(body, "error"), Mapping):
            error = _api_error(body["error"])
        return replied(
            content,
            provider=PROVIDER,
            model=model,
            usage=use,
            stop_reason=stop,
            response_id=response_id,
            extra=extra,
            error=error,
        )

    def assembler(self) -> ChatStream:
        return ChatStream(self)


def _api_error(error: Mapping[str, Any]) -> dict[str, Any]:
    kind = string(error.get("type")) or string(error.get("code")) or "APIError"
    return {"type": kind, "message": string(error.get("message")) or "", "body": dict(error)}


class ChatStream:
    """A Chat Completions stream (``chat.completion.chunk`` events, then ``[DONE]``)."""

    def __init__(self, endpoint: Chat) -> None:
        self._endpoint = endpoint
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._others: dict[int, list[str]] = {}
        self._error: Any = None
        self._done = False
        self._unread: list[str] = []

    def feed(self, event: str | None, data: str) -> Any:
        if data.strip() == "[DONE]":
            self._done = True
            return None
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            self._unread.append(data[:4096])
            return None
        if not isinstance(chunk, Mapping):
            return None
        if isinstance(chunk.get("error"), Mapping):
            self._error = chunk["error"]
            return None
        for key in ("id", "model", "service_tier", "system_fingerprint", "created"):
            if chunk.get(key) is not None:
                self._head[key] = chunk[key]
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        out: Any = None
        for choice in chunk.get("choices") or ():
            index = get(choice, "index") or 0
            delta = get(choice, "delta")
            if index != 0:
                piece = string(get(delta, "content"))
                if piece:
                    self._others.setdefault(index, []).append(piece)
                continue
            if get(choice, "finish_reason") is not None:
                self._finish = choice["finish_reason"]
            piece = string(get(delta, "content"))
            if piece:
                self._text.append(piece)
                out = TextDelta(piece)
            thought = string(get(delta, "reasoning_content")) or string(get(delta, "reasoning"))
            if thought:
                self._reasoning.append(thought)
                out = ThinkingDelta(thought)
            refusal = string(get(delta, "refusal"))
            if refusal:
                self._refusal.append(refusal)
                out = TextDelta(refusal)
            for call in get(delta, "tool_calls") or ():
                slot = self._calls.setdefault(count(get(call, "index")), {"arguments": []})
                if get(call, "id"):
                    slot["id"] = call["id"]
                function = get(call, "function")
                if string(get(function, "name")):
                    slot["name"] = function["name"]
                if string(get(function, "arguments")):
                    slot["arguments"].append(function["arguments"])
        return out

    def outcome(self) -> Outcome:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": slot.get("id", ""),
                    "type": "function",
                    "function": {
                        "name": slot.get("name", ""),
                        "arguments": "".join(slot["arguments"]),
                    },
                }
                for _, slot in sorted(self._calls.items())
            ]
        choices: list[Any] = [{"index": 0, "message": message, "finish_reason": self._finish}]
        choices += [
            {"index": i, "message": {"role": "assistant", "content": "".join(t)}}
            for i, t in sorted(self._others.items())
        ]
        body = {**self._head, "choices": choices, "usage": self._usage}
        outcome = self._endpoint.response(body)
        outcome.complete = self._done
        if self._error is not None:
            outcome.error = _api_error(self._error)
        if self._unread:
            outcome.extra["unread_events"] = self._unread
        return outcome


def _responses_usage(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        return None
    return usage(
        raw.get("input_tokens"),
        raw.get("output_tokens"),
        cache_read=get(raw.get("input_tokens_details"), "cached_tokens"),
        reasoning=get(raw.get("output_tokens_details"), "reasoning_tokens"),
    )


def _texts(parts: Any, *kinds: str) -> list[str]:
    return [
        p["text"]
        for p in parts or ()
        if isinstance(p, Mapping) and p.get("type") in kinds and isinstance(p.get("text"), str)
    ]


class Responses:
    """``POST /responses``."""

    provider = PROVIDER

    def request(self, body: Any) -> RequestParts:
        parts = request_parts(body, "input")
        items = get(body, "input")
        if isinstance(items, str):  # the Responses API's shorthand for one user message
            parts.messages = [{"role": "user", "content": items}]
        return parts

    def response(self, body: Any) -> Outcome:
        content: list[Any] = []
        extra: dict[str, Any] = {}
        for index, item in enumerate(get(body, "output") or ()):
            kind = get(item, "type")
            if kind == "message":
                for part in get(item, "content") or ():
                    ptype = get(part, "type")
                    if ptype == "output_text" and isinstance(get(part, "text"), str):
                        content.append(TextContent(part["text"]))
                    elif ptype == "refusal" and isinstance(get(part, "refusal"), str):
                        content.append(TextContent(part["refusal"]))
                        extra["refusal"] = part["refusal"]
                    else:
                        extra.setdefault("output", []).append({"index": index, "part": part})
            elif kind == "reasoning":
                text = "\n".join(
                    _texts(get(item, "content"), "reasoning_text")
                    or _texts(get(item, "summary"), "summary_text")
                )
                content.append(ThinkingContent(text, string(get(item, "encrypted_content"))))
            elif kind == "function_call":
                content.append(
                    tool_call(get(item, "call_id"), get(item, "name"), get(item, "arguments"))
                )
            else:
                extra.setdefault("output", []).append({"index": index, "item": item})
        for key in ("service_tier", "status", "incomplete_details"):
            if get(body, key) is not None:
                extra[key] = body[key]
        status = string(get(body, "status"))
        stop = string(get(get(body, "incomplete_details"), "reason")) or status
        response_id = string(get(body, "id"))
        state = {
            k: v
            for k, v in (
                ("response_id", response_id),
                ("previous_response_id", string(get(body, "previous_response_id"))),
                ("conversation", get(body, "conversation")),
            )
            if v is not None
        }
        model = string(get(body, "model"))
        use = _responses_usage(get(body, "usage"))
        error = get(body, "error")
        return replied(
            content,
            provider=PROVIDER,
            model=model,
            usage=use,
            stop_reason=stop,
            response_id=response_id,
            provider_state=state or None,
            extra=extra,
            error=_api_error(error) if isinstance(error, Mapping) else None,
        )

    def assembler(self) -> ResponsesStream:
        return ResponsesStream(self)


_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ResponsesStream:
    """A Responses API stream: typed events, the whole response in the final one."""

    def __init__(self, endpoint: Responses) -> None:
        self._endpoint = endpoint
        self._response: dict[str, Any] = {}
        self._items: dict[int, Any] = {}
        self._text: dict[int, list[str]] = {}
        self._thinking: dict[int, list[str]] = {}
        self._args: dict[int, list[str]] = {}
        self._final: Any = None
        self._error: Any = None

    def feed(self, event: str | None, data: str) -> Any:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        kind = get(payload, "type") or event
        index = count(get(payload, "output_index"))
        if kind in _FINAL_EVENTS:
            self._final = get(payload, "response")
        elif kind in ("response.created", "response.in_progress"):
            snapshot = get(payload, "response")
            if isinstance(snapshot, Mapping):
                self._response = dict(snapshot)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._items[index] = get(payload, "item")
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            piece = string(get(payload, "delta")) or ""
            self._text.setdefault(index, []).append(piece)
            return TextDelta(piece)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            piece = string(get(payload, "delta")) or ""
            self._thinking.setdefault(index, []).append(piece)
            return ThinkingDelta(piece)
        elif kind == "response.function_call_arguments.delta":
            self._args.setdefault(index, []).append(string(get(payload, "delta")) or "")
        elif kind == "error":
            self._error = payload
        return None

    def outcome(self) -> Outcome:
        if isinstance(self._final, Mapping):
            outcome = self._endpoint.response(self._final)
            if self._final.get("status") == "failed" and outcome.error is None:
                outcome.error = {"type": "ResponseFailed", "message": ""}
            return outcome
        output: list[Any] = []
        for index in sorted(set(self._items) | set(self._text) | set(self._thinking)):
            item = self._items.get(index)
            kind = get(item, "type")
            if isinstance(item, Mapping) and kind == "function_call" and not item.get("arguments"):
                item = {**item, "arguments": "".join(self._args.get(index, ()))}
            if index in self._text and (kind in (None, "message")) and not get(item, "content"):
                item = {
                    "type": "message",
                    "content": [{"type": "output_text", "text": "".join(self._text[index])}],
                }
            if index in self._thinking and kind in (None, "reasoning"):
                text = "".join(self._thinking[index])
                item = {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}
            if item is not None:
                output.append(item)
        outcome = self._endpoint.response({**self._response, "output": output})
        outcome.complete = False
        if isinstance(self._error, Mapping):
            outcome.error = {
                "type": string(self._error.get("code")) or "StreamError",
                "message": string(self._error.get("message")) or "",
            }
        return outcome


_CHAT, _RESPONSES = Chat(), Responses()


def endpoint_of(options: Any) -> Endpoint | None:
    """The endpoint a request's options name, if loopscribe records it."""
    url = getattr(options, "url", None)
    if getattr(options, "method", "post").lower() != "post" or not isinstance(url, str):
        return None
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return _CHAT
    if path.endswith("/responses"):
        return _RESPONSES
    return None


_SCOPE = _http.sdk_request(endpoint_of)
_patched: list[Instrumentation] = []
"""The SDK-wide patch, while it is in place."""


def instrument(client: Any = None) -> Instrumentation:
    """Record the calls of every OpenAI client (or of ``client`` alone)."""
    from openai import _base_client

    return _http.instrument_stainless(PROVIDER, _base_client, _SCOPE, _patched, client)

"""Record plain OpenAI-style and Anthropic-style client calls, over a fake transport.

Two small model wrappers make provider clients usable by ``ModelExecutor``:

* :class:`OpenAIChatModel` drives the real ``openai.OpenAI`` client
  (``chat.completions.create(stream=True)``);
* :class:`AnthropicMessagesModel` drives an Anthropic-shaped client. The
  ``anthropic`` SDK is not a dependency here, so :class:`FakeAnthropic`
  stands in for it: it speaks the Messages API's streaming wire format and
  returns events shaped like the SDK's, so ``anthropic.Anthropic`` fits too.

Both wrappers lower loopscribe's built-in messages (``SystemMessage``,
``UserMessage``, ``AssistantMessage``, ``ToolResultMessage``) to the
provider's shape, pass provider-shaped dicts through, and turn the stream into
loopscribe chunks: ``TextDelta``, a complete ``ToolCall`` per tool call, and
``StreamEnd`` with the stop reason, the usage and the model that answered.

No request leaves the process: both clients send through an
``httpx2.MockTransport`` (openai 3 sends through ``httpx2``) whose handler
answers with a canned ``text/event-stream`` body. The per-call ``api_key`` in
the request config reaches the fake server as a header only; the recorded
``model_request`` has it removed.

Run it with ``python examples/standalone_calls.py [DIR]``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, cast

import httpx2
import openai

from loopscribe import (
    AssistantMessage,
    Execution,
    ImageContent,
    LLMRequest,
    ModelExecution,
    ModelExecutor,
    ModelResult,
    Observer,
    Recorder,
    Session,
    StreamEnd,
    SystemMessage,
    TextContent,
    TextDelta,
    ThinkingContent,
    ThinkingDelta,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    read,
)
from loopscribe.otel import SpanBridge, default_processor, describe_destination

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

Chunk = TextDelta | ThinkingDelta | ToolCall | StreamEnd


class IncompleteStreamError(ConnectionError):
    """The stream ended cleanly but before the model said it had finished."""


def _text(content: str | Iterable[Any]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextContent))


def _arguments(call_id: str | None, name: str | None, raw: str) -> dict[str, Any]:
    try:
        arguments = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        msg = f"tool call {call_id} ({name}): the arguments are not valid JSON ({exc}): {raw!r}"
        raise ValueError(msg) from exc
    if not isinstance(arguments, dict):
        msg = f"tool call {call_id} ({name}): the arguments are not a JSON object: {raw!r}"
        raise ValueError(msg)
    return arguments


@dataclass(slots=True)
class _PendingCall:
    """A tool call whose fragments are still arriving."""

    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)

    def complete(self) -> ToolCall:
        if not self.id or not self.name:
            msg = f"the stream never gave this tool call's id and name (id={self.id!r})"
            raise ValueError(msg)
        return ToolCall(self.id, self.name, _arguments(self.id, self.name, "".join(self.arguments)))


def _split_config(config: Mapping[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    """The per-call API key, and the rest of the config as request parameters."""
    params = dict(config or {})
    api_key = params.pop("api_key", None)
    return api_key, params


# -- OpenAI chat completions ----------------------------------------------------


def _openai_part(part: Any) -> dict[str, Any]:
    if isinstance(part, TextContent):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImageContent):
        url = f"data:{part.mime_type};base64,{part.data}"
        return {"type": "image_url", "image_url": {"url": url}}
    raise TypeError(f"a user message cannot hold {type(part).__name__} for OpenAI")


def to_openai_messages(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """Lower built-in messages to OpenAI chat messages; dicts pass through unchanged.

    Raises:
        TypeError: A message is neither a built-in message nor a dict.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, Mapping):
            out.append(dict(message))
        elif isinstance(message, SystemMessage):
            out.append({"role": "system", "content": message.content})
        elif isinstance(message, UserMessage):
            content = message.content
            parts: str | list[dict[str, Any]] = (
                content if isinstance(content, str) else [_openai_part(p) for p in content]
            )
            out.append({"role": "user", "content": parts})
        elif isinstance(message, AssistantMessage):
            # Chat completions take no reasoning back: thinking is left out.
            lowered: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                lowered["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(dict(call.arguments)),
                        },
                    }
                    for call in message.tool_calls
                ]
            out.append(lowered)
        elif isinstance(message, ToolResultMessage):
            text = _text(message.content)
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": text})
        else:
            raise TypeError(
                f"cannot send a {type(message).__name__} to OpenAI: give a loopscribe "
                "message or an OpenAI-shaped dict"
            )
    return out


def to_openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """``{"name", "description", "parameters"}`` as an OpenAI function tool; typed tools pass."""
    if "type" in tool:
        return dict(tool)
    function = {"name": tool["name"], "parameters": tool.get("parameters", {"type": "object"})}
    if "description" in tool:
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


class OpenAIChatModel:
    """A model for ``ModelExecutor`` backed by an ``openai.OpenAI`` client's chat completions.

    ``request.config`` becomes request parameters (``temperature``, ...),
    except ``api_key``, which is sent as the call's credential.

    Args:
        client: The OpenAI client (any base URL that speaks chat completions).
        model: The model to request; also the name the call is recorded under.
    """

    def __init__(self, client: openai.OpenAI, model: str) -> None:
        self.client = client
        self.name = model

    def stream(self, request: LLMRequest) -> Iterator[Chunk]:
        """Send ``request`` and yield its text, complete tool calls, then ``StreamEnd``.

        Raises:
            openai.APIError: The server refused the call or the connection broke.
            IncompleteStreamError: The stream ended without a finish reason.
            ValueError: A tool call's arguments are not a JSON object.
        """
        api_key, params = _split_config(request.config)
        client = self.client if api_key is None else self.client.with_options(api_key=api_key)
        tools = [to_openai_tool(t) for t in request.tools]
        stream = client.chat.completions.create(
            model=self.name,
            messages=cast("list[ChatCompletionMessageParam]", to_openai_messages(request.messages)),
            tools=cast("list[ChatCompletionToolUnionParam]", tools) if tools else openai.omit,
            stream=True,
            stream_options={"include_usage": True},
            **params,
        )
        calls: dict[int, _PendingCall] = {}
        finish_reason: str | None = None
        usage: Usage | None = None
        model: str | None = None
        with stream:
            for chunk in stream:
                model = chunk.model or model
                if chunk.usage is not None:
                    details = chunk.usage.prompt_tokens_details
                    cached = (details.cached_tokens if details else None) or 0
                    usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens, cached)
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue
                    if choice.delta.content:
                        yield TextDelta(choice.delta.content)
                    # A tool call arrives in fragments keyed by index: id and
                    # name first, then the arguments JSON in pieces.
                    for fragment in choice.delta.tool_calls or ():
                        pending = calls.setdefault(fragment.index, _PendingCall())
                        pending.id = fragment.id or pending.id
                        if fragment.function is not None:
                            pending.name = fragment.function.name or pending.name
                            pending.arguments.append(fragment.function.arguments or "")
                    finish_reason = choice.finish_reason or finish_reason
        if finish_reason is None:
            raise IncompleteStreamError(
                f"the {self.name} stream ended without a finish_reason: "
                "the server stopped early or the connection was cut"
            )
        for index in sorted(calls):
            yield calls[index].complete()
        yield StreamEnd(finish_reason, usage, model)


# -- an Anthropic-shaped client --------------------------------------------------


class FakeAnthropicError(Exception):
    """The fake Messages API refused the call, or reported an error mid-stream.

    Attributes:
        status_code: The HTTP status (200 for an ``error`` event in the stream).
        error_type: The API's error type, for example ``overloaded_error``.
    """

    def __init__(self, status_code: int, error_type: str, message: str) -> None:
        super().__init__(f"HTTP {status_code} {error_type}: {message}")
        self.status_code = status_code
        self.error_type = error_type


def _api_error(status_code: int, body: str) -> FakeAnthropicError:
    try:
        error = json.loads(body)["error"]
        return FakeAnthropicError(status_code, str(error["type"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return FakeAnthropicError(status_code, "api_error", body[:200])


def _server_sent_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``(event, data)`` pairs; an event not ended by a blank line is dropped, as SSE says."""
    event, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)


class _Messages:
    def __init__(self, client: FakeAnthropic) -> None:
        self._client = client

    def create(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int,
        stream: Literal[True],
        **params: Any,
    ) -> Iterator[Any]:
        """POST ``/v1/messages`` and return the stream's events, like the SDK's ``create``.

        Each event is an object with attribute access (``event.delta.text``),
        as the SDK's typed events are.

        Raises:
            FakeAnthropicError: The server answered with an error status;
                while iterating, the stream carried an ``error`` event.
        """
        if stream is not True:
            raise NotImplementedError("FakeAnthropic only streams: pass stream=True")
        body = {"model": model, "messages": list(messages), "max_tokens": max_tokens}
        http = self._client.http_client
        request = http.build_request(
            "POST",
            f"{self._client.base_url}/v1/messages",
            json={**body, **params, "stream": True},
            headers={"x-api-key": self._client.api_key, "anthropic-version": "2023-06-01"},
        )
        response = http.send(request, stream=True)
        if response.status_code >= 400:
            try:
                text = response.read().decode("utf-8", "replace")
            finally:
                response.close()
            raise _api_error(response.status_code, text)
        return self._events(response)

    @staticmethod
    def _events(response: httpx2.Response) -> Iterator[Any]:
        try:
            for event, data in _server_sent_events(response.iter_lines()):
                if event == "error":
                    raise _api_error(response.status_code, data)
                yield json.loads(data, object_hook=lambda obj: SimpleNamespace(**obj))
        finally:
            response.close()


class FakeAnthropic:
    """A minimal stand-in for ``anthropic.Anthropic``: ``messages.create(stream=True)`` only.

    It speaks the Messages API's wire format through the given ``httpx2``
    client; give it one with a ``MockTransport`` and nothing leaves the process.

    Args:
        api_key: Sent as the ``x-api-key`` header.
        http_client: The client requests go through (required: no default network).
        base_url: Where the Messages API lives.
    """

    def __init__(
        self,
        *,
        api_key: str,
        http_client: httpx2.Client,
        base_url: str = "https://api.anthropic.com",
    ) -> None:
        self.api_key = api_key
        self.http_client = http_client
        self.base_url = base_url.rstrip("/")
        self.messages = _Messages(self)

    def with_options(self, *, api_key: str) -> FakeAnthropic:
        """A copy that sends ``api_key``, sharing the HTTP client (as the SDK's does)."""
        return FakeAnthropic(api_key=api_key, http_client=self.http_client, base_url=self.base_url)


# -- Anthropic messages -----------------------------------------------------------


def _anthropic_part(part: Any) -> dict[str, Any]:
    if isinstance(part, TextContent):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImageContent):
        source = {"type": "base64", "media_type": part.mime_type, "data": part.data}
        return {"type": "image", "source": source}
    if isinstance(part, ToolCall):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": dict(part.arguments)}
    raise TypeError(f"cannot send {type(part).__name__} content to Anthropic")


def to_anthropic_messages(messages: Iterable[Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """Lower built-in messages to Anthropic's: the system prompt apart, tool results as user turns.

    Dicts pass through unchanged. Consecutive tool results share one user
    message, as the API requires.

    Returns:
        The system prompt (``None`` without a ``SystemMessage``) and the messages.

    Raises:
        TypeError: A message is neither a built-in message nor a dict.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the tool-result turn being filled
    for message in messages:
        if isinstance(message, ToolResultMessage):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": [_anthropic_part(p) for p in message.content],
            }
            if message.is_error:
                block["is_error"] = True
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append(block)
            continue
        results = None
        if isinstance(message, Mapping):
            out.append(dict(message))
        elif isinstance(message, SystemMessage):
            system.append(message.content)
        elif isinstance(message, UserMessage):
            content = message.content
            parts: str | list[dict[str, Any]] = (
                content if isinstance(content, str) else [_anthropic_part(p) for p in content]
            )
            out.append({"role": "user", "content": parts})
        elif isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = []
            for part in message.content:
                if isinstance(part, ThinkingContent):
                    # The API refuses thinking without its signature: unsigned is left out.
                    if part.signature:
                        blocks.append(
                            {
                                "type": "thinking",
                                "thinking": part.thinking,
                                "signature": part.signature,
                            }
                        )
                else:
                    blocks.append(_anthropic_part(part))
            out.append({"role": "assistant", "content": blocks})
        else:
            raise TypeError(
                f"cannot send a {type(message).__name__} to Anthropic: give a loopscribe "
                "message or an Anthropic-shaped dict"
            )
    return ("\n\n".join(system) if system else None), out


def to_anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """``{"name", "description", "parameters"}`` as an Anthropic tool; typed tools pass."""
    if "input_schema" in tool or "type" in tool:
        return dict(tool)
    lowered = {"name": tool["name"], "input_schema": tool.get("parameters", {"type": "object"})}
    if "description" in tool:
        lowered["description"] = tool["description"]
    return lowered


class AnthropicMessagesModel:
    """A model for ``ModelExecutor`` backed by an Anthropic-shaped client's Messages API.

    ``request.config`` becomes request parameters (``max_tokens`` defaults to
    1024), except ``api_key``, which is sent as the call's credential.

    Args:
        client: ``anthropic.Anthropic`` or :class:`FakeAnthropic` (duck-typed:
            the SDK is not installed here).
        model: The model to request; also the name the call is recorded under.
    """

    def __init__(self, client: Any, model: str) -> None:
        self.client = client
        self.name = model

    def stream(self, request: LLMRequest) -> Iterator[Chunk]:
        """Send ``request`` and yield its text, thinking, complete tool calls, then ``StreamEnd``.

        Raises:
            Exception: Whatever the client raises for a refused or broken call.
            IncompleteStreamError: The stream ended without ``message_stop``.
            ValueError: A tool call's input is not a JSON object.
        """
        api_key, params = _split_config(request.config)
        client = self.client if api_key is None else self.client.with_options(api_key=api_key)
        system, messages = to_anthropic_messages(request.messages)
        if system is not None:
            params["system"] = system
        if request.tools:
            params["tools"] = [to_anthropic_tool(t) for t in request.tools]
        max_tokens = params.pop("max_tokens", 1024)
        events = client.messages.create(
            model=self.name, messages=messages, max_tokens=max_tokens, stream=True, **params
        )
        calls: dict[int, _PendingCall] = {}
        counts: dict[str, int] = {}
        stop_reason: str | None = None
        model: str | None = None
        finished = False
        with contextlib.closing(events):
            for event in events:
                kind = event.type
                if kind == "message_start":
                    model = event.message.model
                    counts.update(_counts(event.message.usage))
                elif kind == "content_block_start" and event.content_block.type == "tool_use":
                    block = event.content_block
                    calls[event.index] = _PendingCall(block.id, block.name)
                elif kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        yield TextDelta(delta.text)
                    elif delta.type == "thinking_delta":
                        yield ThinkingDelta(delta.thinking)
                    elif delta.type == "input_json_delta":
                        calls[event.index].arguments.append(delta.partial_json)
                elif kind == "content_block_stop" and event.index in calls:
                    yield calls.pop(event.index).complete()
                elif kind == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    counts.update(_counts(event.usage))
                elif kind == "message_stop":
                    finished = True
        if not finished:
            raise IncompleteStreamError(
                f"the {self.name} stream ended before message_stop: "
                "the server stopped early or the connection was cut"
            )
        yield StreamEnd(stop_reason, _anthropic_usage(counts), model)


_TOKEN_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def _counts(usage: Any) -> dict[str, int]:
    """The token counts a usage object carries; message_delta repeats some, or all."""
    found = {name: getattr(usage, name, None) for name in _TOKEN_COUNTS}
    return {name: count for name, count in found.items() if isinstance(count, int)}


def _anthropic_usage(counts: Mapping[str, int]) -> Usage:
    # Anthropic counts cached prompt tokens apart from input_tokens; loopscribe's
    # input_tokens includes them, as the GenAI conventions do.
    cache_read = counts.get("cache_read_input_tokens", 0)
    cache_write = counts.get("cache_creation_input_tokens", 0)
    return Usage(
        counts.get("input_tokens", 0) + cache_read + cache_write,
        counts.get("output_tokens", 0),
        cache_read,
        cache_write,
    )


# -- the fake server ----------------------------------------------------------------


class FakeServer:
    """A ``MockTransport`` handler: answers each request with the next canned response.

    Attributes:
        requests: The requests received, in order.
    """

    def __init__(self, *responses: httpx2.Response) -> None:
        self.responses = list(responses)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        """Keep ``request`` and answer it."""
        self.requests.append(request)
        if not self.responses:
            raise RuntimeError(f"FakeServer has no canned response left for {request.url}")
        return self.responses.pop(0)

    def transport(self) -> httpx2.MockTransport:
        """A transport that sends every request here."""
        return httpx2.MockTransport(self)


def sse_response(body: bytes | Iterator[bytes], status_code: int = 200) -> httpx2.Response:
    """A ``text/event-stream`` response; an iterator body arrives piece by piece."""
    return httpx2.Response(status_code, headers={"content-type": "text/event-stream"}, content=body)


def openai_sse(chunks: Iterable[Mapping[str, Any]]) -> bytes:
    """An OpenAI chat completions stream body: a ``data:`` line per chunk, then ``[DONE]``."""
    lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    return "".join([*lines, "data: [DONE]\n\n"]).encode()


def anthropic_sse(events: Iterable[Mapping[str, Any]]) -> bytes:
    """An Anthropic Messages stream body: ``event:`` and ``data:`` lines per event."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def _openai_chunk(
    delta: Mapping[str, Any] | None,
    finish_reason: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    choices = (
        [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    )
    return {
        "id": "chatcmpl-demo1",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_demo",
        "choices": [{**c, "logprobs": None} for c in choices],
        "usage": None if usage is None else dict(usage),
    }


OPENAI_USAGE = {
    "prompt_tokens": 42,
    "completion_tokens": 17,
    "total_tokens": 59,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
}


def _tool_delta(**fragment: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": 0, **fragment}]}


OPENAI_TOOL_CALL = [
    _openai_chunk({"role": "assistant", "content": None, "refusal": None}),
    _openai_chunk(
        _tool_delta(
            id="call_w1", type="function", function={"name": "get_weather", "arguments": ""}
        )
    ),
    _openai_chunk(_tool_delta(function={"arguments": '{"ci'})),
    _openai_chunk(_tool_delta(function={"arguments": 'ty": "Lisbon"}'})),
    _openai_chunk({}, "tool_calls"),
    _openai_chunk(None, usage=OPENAI_USAGE),
]
"""``get_weather({"city": "Lisbon"})``, as gpt-4o-mini streams it."""

OPENAI_ANSWER = [
    _openai_chunk({"role": "assistant", "content": "", "refusal": None}),
    _openai_chunk({"content": "It is 21°C"}),
    _openai_chunk({"content": " and sunny."}),
    _openai_chunk({}, "stop"),
    _openai_chunk(None, usage={**OPENAI_USAGE, "prompt_tokens": 71, "completion_tokens": 9}),
]
"""A plain answer."""

_CLAUDE = "claude-sonnet-4-5-20250929"


def _message_start(input_tokens: int) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": "msg_demo1",
        "type": "message",
        "role": "assistant",
        "model": _CLAUDE,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1,
        },
    }
    return {"type": "message_start", "message": message}


def _message_end(stop_reason: str, output_tokens: int) -> list[dict[str, Any]]:
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    return [
        {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}},
        {"type": "message_stop"},
    ]


def _block(index: int, **block: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, **delta: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


ANTHROPIC_ANSWER = [
    _message_start(96),
    _block(0, type="text", text=""),
    {"type": "ping"},
    _delta(0, type="text_delta", text="It is"),
    _delta(0, type="text_delta", text=" 21°C and sunny in Lisbon."),
    _block_stop(0),
    *_message_end("end_turn", 14),
]
"""A plain answer, as Claude streams it."""

ANTHROPIC_TOOL_USE = [
    _message_start(380),
    _block(0, type="text", text=""),
    _delta(0, type="text_delta", text="Let me check."),
    _block_stop(0),
    _block(1, type="tool_use", id="toolu_w1", name="get_weather", input={}),
    _delta(1, type="input_json_delta", partial_json=""),
    _delta(1, type="input_json_delta", partial_json='{"city": "Lis'),
    _delta(1, type="input_json_delta", partial_json='bon"}'),
    _block_stop(1),
    *_message_end("tool_use", 55),
]
"""Text, then ``get_weather({"city": "Lisbon"})``, as Claude streams it."""

GET_WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}

DEMO_API_KEY = "sk-demo-never-written"


# -- the demo ------------------------------------------------------------------------


def record_calls(
    path: Path,
    openai_model: OpenAIChatModel,
    anthropic_model: AnthropicMessagesModel,
    observers: Iterable[Observer] = (),
) -> list[ModelResult]:
    """Record two calls: OpenAI asks for the weather tool, Claude answers with its result."""
    config = {"temperature": 0.2, "api_key": DEMO_API_KEY}
    history: list[Any] = [
        SystemMessage("You answer weather questions in one sentence."),
        UserMessage("What's the weather in Lisbon?"),
    ]
    with Session.create(path, observers=observers) as session, session.begin_run() as run:
        executor = ModelExecutor(on_event=Recorder(run))
        ask = executor.call(
            openai_model,
            ModelExecution(
                Execution("lookup", "model"), LLMRequest(history, [GET_WEATHER], config)
            ),
        )
        if ask.message is not None:
            history.append(ask.message)
            for call in ask.message.tool_calls:
                sunny = (TextContent("21°C, sunny"),)
                history.append(ToolResultMessage(call.id, call.name, sunny))
        answer = executor.call(
            anthropic_model,
            ModelExecution(
                Execution("answer", "model"), LLMRequest(history, [GET_WEATHER], config)
            ),
        )
    return [ask, answer]


def summarize(path: Path) -> list[str]:
    """One line per recorded model call, read back from the file."""
    lines: list[str] = []
    for record in read(path):
        if record.type != "model_exec_end" or record.execution is None:
            continue
        data = record.data
        message = data.get("message") or data.get("partial_message")
        text = message.text if isinstance(message, AssistantMessage) else ""
        calls = message.tool_calls if isinstance(message, AssistantMessage) else ()
        shown = ", ".join(f"{c.name}({json.dumps(c.arguments)})" for c in calls) or "none"
        usage = data.get("usage")
        tokens = f"{usage.input_tokens} in / {usage.output_tokens} out" if usage else "unknown"
        error = f", error {data['error']['type']}" if "error" in data else ""
        lines.append(
            f"{record.execution.id}: {data.get('model')}: text {text!r}, "
            f"tool calls {shown}, tokens {tokens}{error}"
        )
    return lines


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-sessions")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"standalone-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}.jsonl"
    openai_server = FakeServer(sse_response(openai_sse(OPENAI_TOOL_CALL)))
    anthropic_server = FakeServer(sse_response(anthropic_sse(ANTHROPIC_ANSWER)))
    processor = default_processor(path)
    try:
        with (
            httpx2.Client(transport=openai_server.transport()) as openai_http,
            httpx2.Client(transport=anthropic_server.transport()) as anthropic_http,
        ):
            gpt = openai.OpenAI(
                api_key="sk-test-not-real",
                base_url="http://fake.invalid/v1",
                http_client=openai_http,
                max_retries=0,
            )
            claude = FakeAnthropic(
                api_key="sk-ant-test-not-real",
                base_url="http://fake.invalid",
                http_client=anthropic_http,
            )
            record_calls(
                path,
                OpenAIChatModel(gpt, "gpt-4o-mini"),
                AnthropicMessagesModel(claude, "claude-sonnet-4-5"),
                [SpanBridge(processor, file_uri=path)],
            )
    finally:
        processor.shutdown()
    print(f"recorded to {path}")
    for line in summarize(path):
        print(f"  {line}")
    as_headers = (
        openai_server.requests[0].headers["authorization"] == f"Bearer {DEMO_API_KEY}"
        and anthropic_server.requests[0].headers["x-api-key"] == DEMO_API_KEY
    )
    leaked = DEMO_API_KEY.encode() in path.read_bytes()
    print(
        f"the config's api_key: sent as a header {'yes' if as_headers else 'NO'}, "
        f"written to the file {'YES' if leaked else 'no'}"
    )
    print(f"spans exported to {describe_destination(path)}")


if __name__ == "__main__":
    main()

"""Google GenAI: ``generate_content`` and its stream, read from the bodies the SDK sends and gets.

The request is recorded as the SDK built it (the Gemini API's JSON, or
Vertex AI's): ``contents`` as the messages, the function declarations of
``tools`` as sent, ``systemInstruction``, ``generationConfig`` and the rest
as the config; the model comes from the URL. The response's first candidate
becomes an :class:`~loopscribe.AssistantMessage`: text, thoughts (with
their signature) and function calls; usage counts cached and thinking
tokens. Other candidates, parts loopscribe has no type for, safety ratings
and the model version are kept under ``response``. A stream is complete when
a chunk carries a finish reason.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import orjson

from .._executor import TextDelta, ThinkingDelta
from .._messages import TextContent, ThinkingContent
from . import _http
from ._body import Outcome, RequestParts
from ._patch import Instrumentation, patch
from ._readers import count, get, replied, split_body, string, tool_call, usage

PROVIDER = "gcp.gemini"


def _usage(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        return None
    thoughts = count(raw.get("thoughtsTokenCount"))
    return usage(
        raw.get("promptTokenCount"),
        count(raw.get("candidatesTokenCount")) + thoughts,
        cache_read=raw.get("cachedContentTokenCount"),
        reasoning=thoughts,
    )


def _parts(parts: Any, extra: dict[str, Any]) -> list[Any]:
    content: list[Any] = []
    for index, part in enumerate(parts or ()):
        text = get(part, "text")
        call = get(part, "functionCall")
        if isinstance(text, str) and get(part, "thought") is True:
            content.append(ThinkingContent(text, string(get(part, "thoughtSignature"))))
        elif isinstance(text, str):
            content.append(TextContent(text))
        elif isinstance(call, Mapping):
            content.append(tool_call(call.get("id"), call.get("name"), call.get("args")))
        else:
            extra.setdefault("parts", []).append({"index": index, "part": part})
    return content


class GenerateContent:
    """``POST .../models/{model}:generateContent`` and ``:streamGenerateContent``."""

    provider = PROVIDER

    def __init__(self, model: str, stream: bool) -> None:
        self.model = model
        self.stream = stream

    def request(self, body: Any) -> RequestParts:
        contents = get(body, "contents")
        tools = get(body, "tools")
        return RequestParts(
            model=self.model,
            messages=list(contents) if isinstance(contents, list) else [],
            tools=list(tools) if isinstance(tools, list) else [],
            config=split_body(body, ("contents", "tools")),
            stream=self.stream,
        )

    def response(self, body: Any) -> Outcome:
        extra: dict[str, Any] = {}
        candidates = get(body, "candidates")
        candidates = candidates if isinstance(candidates, list) else []
        first = candidates[0] if candidates else None
        content = _parts(get(get(first, "content"), "parts"), extra)
        if len(candidates) > 1:
            extra["candidates"] = candidates[1:]
        for key in ("safetyRatings", "citationMetadata", "groundingMetadata", "finishMessage"):
            value = get(first, key)
            if value is not None:
                extra[key] = value
        for key in ("modelVersion", "promptFeedback"):
            if get(body, key) is not None:
                extra[key] = body[key]
        if first is None and not isinstance(get(body, "promptFeedback"), Mapping):
            extra["body"] = body
        model = string(get(body, "modelVersion")) or self.model
        response_id = string(get(body, "responseId"))
        use = _usage(get(body, "usageMetadata"))
        stop = string(get(first, "finishReason"))
        error = get(body, "error")
        return replied(
            content,
            provider=PROVIDER,
            model=model,
            usage=use,
            stop_reason=stop,
            response_id=response_id,
            extra=extra,
            error=(
                {
                    "type": string(error.get("status")) or str(error.get("code") or "APIError"),
                    "message": string(error.get("message")) or "",
                }
                if isinstance(error, Mapping)
                else None
            ),
        )

    def assembler(self) -> GenerateStream:
        return GenerateStream(self)


class GenerateStream:
    """A ``streamGenerateContent?alt=sse`` stream: each event a response with the new parts."""

    def __init__(self, endpoint: GenerateContent) -> None:
        self._endpoint = endpoint
        self._parts: list[Any] = []
        self._last: dict[str, Any] = {}
        self._finish: Any = None
        self._error: Any = None

    def feed(self, event: str | None, data: str) -> Any:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(chunk, Mapping):
            return None
        if isinstance(chunk.get("error"), Mapping):
            self._error = chunk
            return None
        self._last = {k: v for k, v in chunk.items() if k != "candidates"}
        candidates = chunk.get("candidates")
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        if get(first, "finishReason") is not None:
            self._finish = first
        out: Any = None
        for part in get(get(first, "content"), "parts") or ():
            self._merge(part)
            text = get(part, "text")
            if isinstance(text, str) and text:
                out = ThinkingDelta(text) if get(part, "thought") is True else TextDelta(text)
        return out

    def _merge(self, part: Any) -> None:
        """Text continues the previous part of its kind; anything else is a part of its own."""
        last = self._parts[-1] if self._parts else None
        text = get(part, "text")
        if (
            isinstance(text, str)
            and isinstance(last, dict)
            and isinstance(last.get("text"), str)
            and bool(last.get("thought")) == bool(get(part, "thought"))
            and not last.get("thoughtSignature")
        ):
            last["text"] += text
            if get(part, "thoughtSignature"):
                last["thoughtSignature"] = part["thoughtSignature"]
        else:
            self._parts.append(dict(part) if isinstance(part, Mapping) else part)

    def outcome(self) -> Outcome:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": self._parts}}
        if isinstance(self._finish, Mapping):
            candidate.update({k: v for k, v in self._finish.items() if k != "content"})
        outcome = self._endpoint.response({**self._last, "candidates": [candidate]})
        outcome.complete = self._finish is not None
        if self._error is not None:
            outcome.error = self._endpoint.response(self._error).error
        return outcome


def endpoint_of(url: str) -> GenerateContent | None:
    """The endpoint a request URL names, if loopscribe records it."""
    path = url.split("?", 1)[0]
    head, _, method = path.rpartition(":")
    if method not in ("generateContent", "streamGenerateContent"):
        return None
    model = head.rpartition("/models/")[2] or head.rpartition("/")[2]
    return GenerateContent(model, method == "streamGenerateContent")


def _scope(client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    request = args[0] if args else kwargs.get("http_request")
    endpoint = endpoint_of(str(getattr(request, "url", "")))
    if endpoint is None or str(getattr(request, "method", "post")).lower() != "post":
        return None
    return endpoint, None  # the HTTP client is chosen per attempt: see _http_client


def _with_client(asynchronous: bool) -> _http.Scope:
    def scope(client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        found = _scope(client, args, kwargs)
        if found is None:
            return None
        name = "_async_httpx_client" if asynchronous else "_httpx_client"
        return found[0], getattr(client, name, None)

    return scope


_patched: list[Instrumentation] = []


def instrument(client: Any = None) -> Instrumentation:
    """Record ``generate_content`` calls of every ``google.genai`` client (or of ``client``)."""
    from google.genai import _api_client

    if client is not None:
        api = client._api_client
        owner = type(api)
        api._request = types.MethodType(
            _http.wrap_request(owner._request, _with_client(False)), api
        )
        api._async_request = types.MethodType(
            _http.wrap_request(owner._async_request, _with_client(True)), api
        )

        def undo_one() -> None:
            for name in ("_request", "_async_request"):
                api.__dict__.pop(name, None)
            for name in ("_httpx_client", "_async_httpx_client"):
                http = getattr(api, name, None)
                if http is not None:
                    http.__dict__.pop("send", None)

        return Instrumentation("google_genai client", undo_one)
    if _patched and _patched[0].active:
        return _patched[0]
    base = _api_client.BaseApiClient
    undos = [
        patch(base, "_request", lambda f: _http.wrap_request(f, _with_client(False))),
        patch(base, "_async_request", lambda f: _http.wrap_request(f, _with_client(True))),
    ]

    def undo() -> None:
        for step in reversed(undos):
            step()
        _http.unwrap_http_clients(PROVIDER)

    _patched[:] = [Instrumentation("google_genai", undo)]
    return _patched[0]

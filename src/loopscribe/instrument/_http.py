"""One model call as the SDK's HTTP client saw it: every attempt, its exact body, its response.

An SDK's request method (its retry loop) is wrapped to open a :class:`Call`
for the endpoints loopscribe knows; the SDK's HTTP client (``httpx``) gets
a ``send`` that records each attempt of the loop in that call:

* ``model_exec_start`` and ``model_request`` when an attempt is sent, the
  request read from the body the SDK built (``http.url``, ``http.method``
  and the body's size and SHA-256 beside it, never a header);
* ``model_exec_end`` when its response is complete: the message, or the
  error (the HTTP status as ``error.type``, the body as it came, JSON or
  not) and the partial message of a stream that broke, ended early or that
  the caller stopped reading;
* ``retry_scheduled`` on a failed attempt when the SDK sends the next one.

Streamed bodies are read as the caller reads them (a tee on the response's
byte stream): each delta goes to live subscribers as a transient
``model_stream`` and nothing is read ahead. Whatever fails in here is
logged and counted; the SDK and its caller see exactly what they would
without loopscribe.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import secrets
import sys
import threading
import weakref
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import orjson
from opentelemetry import trace

from .. import events as ev
from .._messages import AssistantMessage, TextContent, ThinkingContent, Usage
from .._model import Event, Execution
from .._session import Run
from ..otel import host_execution_id
from ._mcp import mcp_tools_of
from ._target import target_run

logger = logging.getLogger("loopscribe.instrument")

_BODY_LIMIT: Final = 1 << 20
"""Bytes of a non-streamed error body kept in the record (a 500 page can be large)."""
_JSON_LIMIT: Final = 64 << 20
"""Bytes of a streamed JSON body read along; past this the response is recorded without it."""


@dataclass(slots=True)
class RequestParts:
    """What an endpoint reads from a request body."""

    model: str
    messages: list[Any]
    tools: list[Any]
    config: dict[str, Any]
    stream: bool = False


@dataclass(slots=True)
class Outcome:
    """What an endpoint reads from a response body, or has assembled from a stream.

    ``complete`` is ``False`` for a stream whose final event never came.
    ``extra`` holds what the provider said beyond the message (refusal,
    service tier, blocks loopscribe has no type for), kept as it came.
    """

    message: AssistantMessage | None = None
    usage: Usage | None = None
    model: str | None = None
    stop_reason: str | None = None
    response_id: str | None = None
    provider_state: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    complete: bool = True
    error: dict[str, Any] | None = None


class Assembler(Protocol):
    """Builds a response from a stream's server-sent events."""

    def feed(self, event: str | None, data: str) -> Any:
        """Take one event; return a delta for live subscribers, or ``None``."""

    def outcome(self) -> Outcome:
        """What the events so far make (``complete`` once the final one came)."""


class Endpoint(Protocol):
    """One API of one SDK: how its bodies read."""

    provider: str

    def request(self, body: Any) -> RequestParts:
        """The request's parts, from its JSON body."""

    def response(self, body: Any) -> Outcome:
        """The response, from its JSON body."""

    def assembler(self) -> Assembler:
        """A fresh stream assembler."""


CURRENT_CALL: ContextVar[Call | None] = ContextVar("loopscribe_instrument_call", default=None)
failures = [0]
"""How many recording steps failed (each logged once per kind)."""


def _now() -> datetime:
    return datetime.now(UTC)


def _record(run: Run, event: Event) -> None:
    try:
        run.record(event)
    except Exception:
        failures[0] += 1
        if failures[0] == 1:
            logger.exception(
                "loopscribe could not record %s; later failures are counted", event.type
            )


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _text(raw: bytes) -> str:
    return raw[:_BODY_LIMIT].decode("utf-8", "replace")


def status_error(status: int, raw: bytes) -> dict[str, Any]:
    """The error of a response with an HTTP error status: the body as it came, JSON or not."""
    body = _loads(raw) if len(raw) <= _BODY_LIMIT else None
    message = ""
    if isinstance(body, Mapping):
        inner = body.get("error")
        found = inner.get("message") if isinstance(inner, Mapping) else body.get("message")
        message = found if isinstance(found, str) else ""
    error: dict[str, Any] = {"type": str(status), "message": message, "status": status}
    if body is not None:
        error["body"] = body
    elif raw:
        error["body_text"] = _text(raw)
        if len(raw) > _BODY_LIMIT:
            error["body_bytes"] = len(raw)
    return error


STREAM_CLOSED: Final = {
    "type": "StreamClosed",
    "message": "the caller closed the stream before its end",
}
INCOMPLETE: Final = {
    "type": "IncompleteStream",
    "message": "the stream ended before its final event",
}


class Call:
    """One model call of an SDK: its attempts, as the SDK's retry loop sends them."""

    __slots__ = ("_failed", "_open", "attempt", "endpoint", "id", "run")

    def __init__(self, endpoint: Endpoint, run: Run) -> None:
        self.endpoint = endpoint
        self.run = run
        host = _host_span()
        # Inside another instrumentation's span for this very call, the call is that
        # span: its records name it, and the bridge makes no second span.
        self.id = (
            host_execution_id(host)
            if host is not None
            else f"{endpoint.provider}_{secrets.token_hex(6)}"
        )
        self.attempt = 0
        # The attempt whose response is still being read (its execution), if any.
        self._open: Execution | None = None
        # The last attempt's failure and when it ended, for retry_scheduled.
        self._failed: tuple[Execution, dict[str, Any], datetime] | None = None

    # -- attempts --------------------------------------------------------------

    def begin(self, request: Any) -> Execution:
        """An attempt is sent: record its start and its request, exactly as built."""
        now = _now()
        if self._open is not None:
            # The previous attempt's response was dropped unread (the SDK retried).
            self.end(self._open, None, STREAM_CLOSED)
        if self._failed is not None:
            failed, error, at = self._failed
            delay_ms = (now - at).total_seconds() * 1000.0
            _record(
                self.run,
                ev.retry_scheduled(
                    failed,
                    next_attempt=failed.attempt + 1,
                    delay_ms=delay_ms,
                    error=error,
                    timestamp=now,
                ),
            )
            self._failed = None
        self.attempt += 1
        ex = Execution(self.id, "model", self.attempt)
        self._open = ex
        raw = _content(request)
        body = _loads(raw) if raw is not None else None
        try:
            parts = self.endpoint.request(body)
        except Exception:
            logger.exception("loopscribe could not read a %s request", self.endpoint.provider)
            parts = RequestParts("", [], [], {})
        url = request.url
        _record(
            self.run,
            ev.model_exec_start(
                ex,
                parts.model,
                provider=self.endpoint.provider,
                stream=parts.stream,
                server_address=url.host or None,
                server_port=url.port,
                timestamp=now,
            ),
        )
        event = ev.model_request(
            ex, parts.messages, parts.tools, parts.config, model=parts.model, timestamp=now
        )
        http: dict[str, Any] = {"method": request.method, "url": _url(url)}
        if raw is not None:
            http["body_bytes"] = len(raw)
            http["body_sha256"] = hashlib.sha256(raw).hexdigest()
            if body is None and raw:
                http["body_text"] = _text(raw)
        data = {**event.data, "http": http}
        servers = mcp_tools_of(self.run, parts.tools) if parts.tools else None
        if servers:
            data["mcp_tools"] = servers
        _record(self.run, Event(event.type, ex, data, now))
        if self.attempt == 1:
            for message in _transcript(self.run).new(parts.messages):
                _record(self.run, ev.message_end(ex, message, timestamp=now))
        return ex

    def end(
        self,
        ex: Execution,
        outcome: Outcome | None,
        error: Mapping[str, Any] | BaseException | None,
        http: Mapping[str, Any] | None = None,
    ) -> None:
        """An attempt ended: its message, or its error and the partial message."""
        if self._open is not ex:
            return
        self._open = None
        now = _now()
        outcome = outcome or Outcome()
        if error is None and outcome.error is not None:
            error = outcome.error
        if error is None:
            event = ev.model_exec_end(
                ex,
                message=outcome.message,
                usage=outcome.usage,
                model=outcome.model,
                stop_reason=outcome.stop_reason,
                response_id=outcome.response_id,
                provider_state=outcome.provider_state,
                timestamp=now,
            )
        else:
            partial = outcome.message
            if partial is not None and not partial.content:
                partial = None
            event = ev.model_exec_end(
                ex,
                partial_message=partial,
                error=error,
                usage=outcome.usage,
                model=outcome.model,
                stop_reason=outcome.stop_reason,
                response_id=outcome.response_id,
                provider_state=outcome.provider_state,
                timestamp=now,
            )
            self._failed = (ex, dict(event.data["error"]), now)
        data = dict(event.data)
        if error is None and outcome.message is not None:
            _record(self.run, Event(event.type, ex, {**data, **_extras(outcome, http)}, now))
            _record(self.run, ev.message_end(ex, outcome.message, timestamp=now))
            return
        if outcome.extra:
            data["response"] = outcome.extra
        if http:
            data["http"] = dict(http)
        _record(self.run, Event(event.type, ex, data, now))

    def delta(self, ex: Execution, chunk: Any) -> None:
        """A streamed delta, for live subscribers (never written)."""
        if chunk is not None:
            _record(self.run, ev.model_stream(ex, chunk))

    def raised(self, ex: Execution, exc: BaseException) -> None:
        """Sending the attempt raised (connection error, timeout, cancellation)."""
        self.end(ex, None, exc)

    def abandon(self, exc: BaseException) -> None:
        """The SDK's call raised with an attempt still open: end it with that error."""
        if self._open is not None and not isinstance(exc, GeneratorExit):
            self.end(self._open, None, exc)

    # -- responses -------------------------------------------------------------

    def received(self, ex: Execution, response: Any) -> Any:
        """The attempt's response arrived: record it now if read, else as it is read."""
        try:
            return self._received(ex, response)
        except Exception:
            failures[0] += 1
            logger.exception("loopscribe could not follow a %s response", self.endpoint.provider)
            return response

    def _received(self, ex: Execution, response: Any) -> Any:
        reader = _Reader(self, ex, response)
        if response.is_stream_consumed or response.is_closed:
            try:
                raw = response.content
            except Exception:
                raw = b""
            reader.whole(raw)
            return response
        stream = response.stream
        base = _stream_base(response, asynchronous=not hasattr(stream, "__iter__"))
        if base is None:
            return response
        response.stream = _tee_class(base)(stream, reader)
        return response


def _extras(outcome: Outcome, http: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if outcome.extra:
        out["response"] = outcome.extra
    if http:
        out["http"] = dict(http)
    return out


_ASSISTANT_ITEMS: Final = frozenset(
    {
        "function_call",
        "reasoning",
        "custom_tool_call",
        "local_shell_call",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_call",
        "mcp_list_tools",
    }
)


class _Transcript:
    """The messages a run committed already, so each request commits only the new ones.

    A request repeats the conversation; its user, system and tool messages
    are committed (``message_end``) the first time they are seen, and the
    model's messages when its response arrives (not again when the next
    request sends them back).
    """

    __slots__ = ("_lock", "_seen")

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def new(self, messages: list[Any]) -> list[Any]:
        fresh: list[Any] = []
        with self._lock:
            for message in messages:
                if isinstance(message, Mapping) and (
                    message.get("role") in ("assistant", "model")
                    or message.get("type") in _ASSISTANT_ITEMS
                ):
                    continue
                try:
                    # The SDK serialises a conversation's messages the same way every time.
                    key = hash(orjson.dumps(message))
                except TypeError:
                    continue
                if key not in self._seen:
                    self._seen.add(key)
                    fresh.append(message)
        return fresh


_transcripts: weakref.WeakKeyDictionary[Run, _Transcript] = weakref.WeakKeyDictionary()
_transcripts_lock = threading.Lock()


def _transcript(run: Run) -> _Transcript:
    found = _transcripts.get(run)
    if found is None:
        with _transcripts_lock:
            found = _transcripts.setdefault(run, _Transcript())
    return found


_GENAI_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})


def _host_span() -> int | None:
    """The span ID of a model-call span another instrumentation opened around this call."""
    span = trace.get_current_span()
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    attributes = getattr(span, "attributes", None)
    if not isinstance(attributes, Mapping):
        return None
    if (
        attributes.get("gen_ai.operation.name") in _GENAI_OPERATIONS
        or attributes.get("openinference.span.kind") == "LLM"
        or attributes.get("llm.request.type") in ("chat", "completion")
    ):
        return ctx.span_id
    return None


def _content(request: Any) -> bytes | None:
    try:
        raw = request.content
    except Exception:
        return None  # a streamed upload: not a model request body
    return raw if isinstance(raw, bytes) else None


def _url(url: Any) -> str:
    """The request URL without user info or query (keys can travel in a query)."""
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}{url.path}"


def _header(response: Any, name: str) -> str | None:
    try:
        value = response.headers.get(name)
    except Exception:
        return None
    return value if isinstance(value, str) else None


class _SSE:
    """Server-sent events from byte chunks, as they arrive."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> Iterator[tuple[str | None, str]]:
        buf = self._buf + chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        while True:
            end = buf.find(b"\n\n")
            if end < 0:
                break
            block, buf = buf[:end], buf[end + 2 :]
            parsed = _event_block(block)
            if parsed is not None:
                yield parsed
        self._buf = buf


def _event_block(block: bytes) -> tuple[str | None, str] | None:
    event: str | None = None
    data: list[str] = []
    for line in block.decode("utf-8", "replace").split("\n"):
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if not data and event is None:
        return None
    return event, "\n".join(data)


class _Reader:
    """Reads one attempt's response body along with the SDK, and ends the attempt."""

    __slots__ = ("_assembler", "_bytes", "_call", "_decoder", "_ex", "_http", "_sse", "_status")

    def __init__(self, call: Call, ex: Execution, response: Any) -> None:
        self._call = call
        self._ex = ex
        self._status: int = response.status_code
        self._http: dict[str, Any] = {"status": self._status}
        request_id = _header(response, "x-request-id") or _header(response, "request-id")
        if request_id:
            self._http["request_id"] = request_id
        kind = (_header(response, "content-type") or "").lower()
        self._sse: _SSE | None = None
        self._assembler: Assembler | None = None
        self._bytes: bytearray | None = bytearray()
        if "text/event-stream" in kind and self._status < 400:
            self._sse = _SSE()
            self._assembler = call.endpoint.assembler()
            self._bytes = None
        encoding = (_header(response, "content-encoding") or "").lower()
        self._decoder: Any = None
        if encoding in ("gzip", "deflate"):
            self._decoder = zlib.decompressobj(wbits=47)
        elif encoding not in ("", "identity"):
            self._sse = self._assembler = self._bytes = None  # br, zstd: not read along

    def whole(self, raw: bytes) -> None:
        """The body, read by the HTTP client already."""
        if self._status >= 400:
            self._call.end(self._ex, None, status_error(self._status, raw), self._http)
            return
        if self._sse is not None:
            self.data(raw)
            self.done()
            return
        self._finish_json(raw)

    def _finish_json(self, raw: bytes) -> None:
        body = _loads(raw)
        if body is None:
            error = {"type": "InvalidResponse", "message": "the response body is not JSON"}
            self._http["body_text"] = _text(raw)
            self._call.end(self._ex, None, error, self._http)
            return
        try:
            outcome = self._call.endpoint.response(body)
        except Exception:
            logger.exception(
                "loopscribe could not read a %s response", self._call.endpoint.provider
            )
            outcome = Outcome(extra={"body": body})
        self._call.end(self._ex, outcome, None, self._http)

    def data(self, chunk: bytes) -> None:
        """A chunk of the body as the caller reads it."""
        try:
            if self._decoder is not None:
                chunk = self._decoder.decompress(chunk)
            if self._bytes is not None:
                self._bytes += chunk
                if len(self._bytes) > _JSON_LIMIT:
                    self._bytes = None
            elif self._sse is not None and self._assembler is not None:
                for event, text in self._sse.feed(chunk):
                    self._call.delta(self._ex, self._assembler.feed(event, text))
        except Exception:
            failures[0] += 1
            logger.exception(
                "loopscribe could not read a streamed %s body", self._call.endpoint.provider
            )
            self._sse = self._assembler = None

    def done(self) -> None:
        """The body ended where the server ended it."""
        if self._assembler is not None:
            outcome = self._safe_outcome()
            error = None if outcome.complete else INCOMPLETE
            self._call.end(self._ex, outcome, error, self._http)
        elif self._bytes is not None:
            raw = bytes(self._bytes)
            if self._status >= 400:
                self._call.end(self._ex, None, status_error(self._status, raw), self._http)
            else:
                self._finish_json(raw)
        else:
            error = status_error(self._status, b"") if self._status >= 400 else None
            self._call.end(self._ex, None, error, self._http)

    def broke(self, error: Mapping[str, Any] | BaseException) -> None:
        """The body stopped: the transport failed, or the caller closed it unread."""
        outcome = self._safe_outcome() if self._assembler is not None else None
        if outcome is not None and outcome.complete and error is STREAM_CLOSED:
            # The final event came; the SDK stopped there and closed the rest unread.
            self._call.end(self._ex, outcome, None, self._http)
            return
        if outcome is not None and outcome.error is not None and error is STREAM_CLOSED:
            error = outcome.error  # the server's error event, which made the SDK stop
        if self._status >= 400 and self._bytes is not None:
            error = status_error(self._status, bytes(self._bytes))
        self._call.end(self._ex, outcome, error, self._http)

    def _safe_outcome(self) -> Outcome:
        assert self._assembler is not None
        try:
            return self._assembler.outcome()
        except Exception:
            logger.exception(
                "loopscribe could not assemble a %s stream", self._call.endpoint.provider
            )
            return Outcome(complete=False)


_TEES: dict[type[Any], type[Any]] = {}


def _stream_base(response: Any, *, asynchronous: bool) -> type[Any] | None:
    """The byte stream base class of the response's HTTP library (``httpx`` or ``httpx2``)."""
    module = sys.modules.get(type(response).__module__.partition(".")[0])
    name = "AsyncByteStream" if asynchronous else "SyncByteStream"
    base = getattr(module, name, None)
    return base if isinstance(base, type) else None


def _tee_class(base: type[Any]) -> type[Any]:
    tee = _TEES.get(base)
    if tee is None:
        mixin = _AsyncTee if "Async" in base.__name__ else _SyncTee
        tee = _TEES[base] = type(f"Loopscribe{mixin.__name__}", (mixin, base), {})
    return tee


class _SyncTee:
    """A response byte stream that hands each chunk to a reader as the caller reads it."""

    def __init__(self, inner: Any, reader: _Reader) -> None:
        self._inner = inner
        self._reader = reader
        self._ended = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._inner:
                self._reader.data(chunk)
                yield chunk
        except Exception as exc:
            self._end(exc)
            raise
        self._end(None)

    def _end(self, exc: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            if exc is None:
                self._reader.done()
            else:
                self._reader.broke(exc)
        except Exception:
            failures[0] += 1
            logger.exception("loopscribe could not end a streamed call")

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._end_closed()

    def _end_closed(self) -> None:
        if not self._ended:
            self._ended = True
            with contextlib.suppress(Exception):
                self._reader.broke(STREAM_CLOSED)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # ``elapsed`` and the like


class _AsyncTee(_SyncTee):
    """The async twin of :class:`_SyncTee`."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                self._reader.data(chunk)
                yield chunk
        except Exception as exc:
            self._end(exc)
            raise
        self._end(None)

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._end_closed()


# -- installing on an SDK ------------------------------------------------------------


_wrapped_clients: dict[str, weakref.WeakSet[Any]] = {}


def wrap_http_client(http_client: Any, provider: str) -> None:
    """Give an SDK's ``httpx`` client a ``send`` that records the attempts of the current call."""
    if "send" in vars(http_client):
        return
    original = http_client.send
    if inspect.iscoroutinefunction(original):

        async def asend(request: Any, *args: Any, **kwargs: Any) -> Any:
            call = CURRENT_CALL.get()
            if call is None:
                return await original(request, *args, **kwargs)
            ex = _safe_begin(call, request)
            try:
                response = await original(request, *args, **kwargs)
            except BaseException as exc:
                if ex is not None:
                    _safe(call.raised, ex, exc)
                raise
            return response if ex is None else call.received(ex, response)

        http_client.send = asend
    else:

        def send(request: Any, *args: Any, **kwargs: Any) -> Any:
            call = CURRENT_CALL.get()
            if call is None:
                return original(request, *args, **kwargs)
            ex = _safe_begin(call, request)
            try:
                response = original(request, *args, **kwargs)
            except BaseException as exc:
                if ex is not None:
                    _safe(call.raised, ex, exc)
                raise
            return response if ex is None else call.received(ex, response)

        http_client.send = send
    _wrapped_clients.setdefault(provider, weakref.WeakSet()).add(http_client)


def unwrap_http_clients(provider: str) -> None:
    """Take the ``send`` given to ``provider``'s clients off again."""
    for client in list(_wrapped_clients.pop(provider, ())):
        client.__dict__.pop("send", None)


def _safe_begin(call: Call, request: Any) -> Execution | None:
    try:
        return call.begin(request)
    except Exception:
        failures[0] += 1
        logger.exception("loopscribe could not record an attempt")
        return None


def _safe(fn: Callable[..., object], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        failures[0] += 1
        logger.exception("loopscribe could not record a failed attempt")


def open_call(endpoint: Endpoint, http_client: Any) -> Call | None:
    """A call for ``endpoint`` in the run calls are recorded into now, or ``None``."""
    if CURRENT_CALL.get() is not None:
        return None
    try:
        run = target_run()
        if run is None:
            return None
        wrap_http_client(http_client, endpoint.provider)
        return Call(endpoint, run)
    except Exception:
        failures[0] += 1
        logger.exception("loopscribe could not open a call")
        return None


Scope = Callable[[Any, tuple[Any, ...], dict[str, Any]], "tuple[Endpoint, Any] | None"]
"""An SDK client and a request call's arguments to its endpoint and HTTP client (or ``None``)."""


def sdk_request(endpoint_of: Callable[[Any], Endpoint | None]) -> Scope:
    """The scope of a Stainless SDK's ``request(cast_to, options, ...)`` (OpenAI, Anthropic)."""

    def scope(client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        options = args[1] if len(args) > 1 else kwargs.get("options")
        endpoint = endpoint_of(options)
        return None if endpoint is None else (endpoint, client._client)

    return scope


def wrap_request(original: Callable[..., Any], scope: Scope) -> Callable[..., Any]:
    """Wrap an SDK's request method (its retry loop): a call per model request."""
    if inspect.iscoroutinefunction(original):

        async def arequest(self: Any, *args: Any, **kwargs: Any) -> Any:
            call = _open(scope, self, args, kwargs)
            if call is None:
                return await original(self, *args, **kwargs)
            token = CURRENT_CALL.set(call)
            try:
                return await original(self, *args, **kwargs)
            except BaseException as exc:
                _safe(call.abandon, exc)
                raise
            finally:
                CURRENT_CALL.reset(token)

        arequest.__wrapped__ = original  # type: ignore[attr-defined]
        return arequest

    def request(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _open(scope, self, args, kwargs)
        if call is None:
            return original(self, *args, **kwargs)
        token = CURRENT_CALL.set(call)
        try:
            return original(self, *args, **kwargs)
        except BaseException as exc:
            _safe(call.abandon, exc)
            raise
        finally:
            CURRENT_CALL.reset(token)

    request.__wrapped__ = original  # type: ignore[attr-defined]
    return request


def _open(scope: Scope, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call | None:
    if CURRENT_CALL.get() is not None:
        return None
    try:
        found = scope(client, args, kwargs)
    except Exception:
        failures[0] += 1
        logger.exception("loopscribe could not tell what an SDK request is")
        return None
    if found is None or found[1] is None:
        return None
    return open_call(found[0], found[1])


def text_message(
    text: list[str], thinking: list[str], calls: list[Any], **meta: Any
) -> AssistantMessage:
    """An assistant message from assembled pieces."""
    content: list[Any] = []
    if thinking:
        content.append(ThinkingContent("".join(thinking)))
    if text:
        content.append(TextContent("".join(text)))
    content.extend(calls)
    return AssistantMessage(tuple(content), **meta)

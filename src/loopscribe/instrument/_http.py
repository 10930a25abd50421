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

import hashlib
import inspect
import secrets
import threading
import types
import weakref
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

import orjson
from opentelemetry import trace

from .. import events as ev
from .._model import Event, Execution
from .._session import Run
from ..otel import host_execution_id
from ._body import (
    GUARD,
    STREAM_CLOSED,
    Endpoint,
    Outcome,
    Reader,
    RequestParts,
    body_text,
    loads,
    stream_base,
    tee_class,
)
from ._mcp import mcp_tools_of
from ._patch import Instrumentation, patch
from ._target import target_run

CURRENT_CALL: ContextVar[Call | None] = ContextVar("loopscribe_instrument_call", default=None)


def _now() -> datetime:
    return datetime.now(UTC)


def _record(run: Run, event: Event) -> None:
    GUARD.record(run, event)


class Call:
    """One model call of an SDK: its attempts, as the SDK's retry loop sends them."""

    __slots__ = ("_failed", "_open", "attempt", "endpoint", "id", "run")

    def __init__(self, endpoint: Endpoint, run: Run) -> None:
        self.endpoint = endpoint
        self.run = run
        host = _adopt(run, _host_span())
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
        # Each attempt the SDK's retry loop sends is the next attempt of the call's execution.
        # The id is this call's alone (a fresh one, or a host span no other call of the run
        # took), so the call counts its attempts itself: the run's RunIds would keep every
        # call id for as long as the run lives, and the per-process session's run lives
        # as long as the process.
        self.attempt += 1
        ex = Execution(self.id, "model", self.attempt)
        self._open = ex
        raw = _content(request)
        body = loads(raw) if raw is not None else None
        try:
            parts = self.endpoint.request(body)
        except Exception:
            GUARD.failed(f"reading a {self.endpoint.provider} request")
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
                http["body_text"] = body_text(raw)
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
            GUARD.failed(f"following a {self.endpoint.provider} response")
            return response

    def _received(self, ex: Execution, response: Any) -> Any:
        reader = Reader(self, ex, response)
        if response.is_stream_consumed or response.is_closed:
            try:
                raw = response.content
            except Exception:
                raw = b""
            reader.whole(raw)
            return response
        stream = response.stream
        base = stream_base(response, asynchronous=not hasattr(stream, "__iter__"))
        if base is None:
            return response
        response.stream = tee_class(base)(stream, reader)
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


_KEPT_CONVERSATIONS: Final = 16
"""Conversations of one run whose last request is remembered (interleaved ones, too)."""


class _Transcript:
    """What each request adds to its conversation, so a message is committed once.

    A request repeats its conversation: the new messages are those after
    the longest common prefix with a recent request of the run (a Responses
    API request that continues by ``previous_response_id`` sends only new
    ones). Of those, the user, system and tool messages are committed
    (``message_end``); the model's messages are committed when its response
    arrives, not again when the next request sends them back. The same
    words said twice are two messages.
    """

    __slots__ = ("_lock", "_recent")

    def __init__(self) -> None:
        self._recent: list[list[int]] = []
        self._lock = threading.Lock()

    def new(self, messages: list[Any]) -> list[Any]:
        keys: list[int] = []
        for message in messages:
            try:
                # The SDK serialises a conversation's messages the same way every time.
                keys.append(hash(orjson.dumps(message)))
            except TypeError:
                keys.append(id(message))
        with self._lock:
            best, at = 0, -1
            for index, earlier in enumerate(self._recent):
                shared = _common_prefix(earlier, keys)
                if shared > best:
                    best, at = shared, index
            if at >= 0:
                del self._recent[at]
            self._recent.append(keys)
            del self._recent[:-_KEPT_CONVERSATIONS]
        return [
            message
            for message in messages[best:]
            if not (
                isinstance(message, Mapping)
                and (
                    message.get("role") in ("assistant", "model")
                    or message.get("type") in _ASSISTANT_ITEMS
                )
            )
        ]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


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


_adopted: weakref.WeakKeyDictionary[Run, set[int]] = weakref.WeakKeyDictionary()


def _adopt(run: Run, span_id: int | None) -> int | None:
    """``span_id`` if no call of ``run`` took that span's identity yet (one call per span)."""
    if span_id is None:
        return None
    with _transcripts_lock:
        taken = _adopted.setdefault(run, set())
        if span_id in taken:
            return None
        taken.add(span_id)
    return span_id


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
    ex: Execution | None = GUARD.call("recording an attempt", call.begin, request)
    return ex


def _safe(fn: Callable[..., object], *args: Any) -> None:
    GUARD.call("recording a failed attempt", fn, *args)


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
        GUARD.failed("opening a call")
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
        GUARD.failed("telling what an SDK request is")
        return None
    if found is None or found[1] is None:
        return None
    return open_call(found[0], found[1])


def instrument_stainless(
    name: str, base_client: Any, scope: Scope, patched: list[Instrumentation], client: Any
) -> Instrumentation:
    """Patch an SDK generated the same way (OpenAI's, Anthropic's): every client's
    ``request`` on its sync and async base classes, or one ``client``'s alone.

    ``patched`` holds the SDK-wide patch while it is in place, so instrumenting
    twice returns the same handle.
    """
    if client is not None:
        original = type(client).request
        client.request = types.MethodType(wrap_request(original, scope), client)

        def undo_one() -> None:
            client.__dict__.pop("request", None)
            http = getattr(client, "_client", None)
            if http is not None:
                http.__dict__.pop("send", None)

        return Instrumentation(f"{name} client", undo_one)
    if patched and patched[0].active:
        return patched[0]
    undos = [
        patch(base_client.SyncAPIClient, "request", lambda f: wrap_request(f, scope)),
        patch(base_client.AsyncAPIClient, "request", lambda f: wrap_request(f, scope)),
    ]

    def undo() -> None:
        for step in reversed(undos):
            step()
        unwrap_http_clients(name)

    patched[:] = [Instrumentation(name, undo)]
    return patched[0]

"""Request and response bodies: what an endpoint reads from them, and reading a body along.

:class:`RequestParts` and :class:`Outcome` are what an SDK's mapping makes of
a request body and a response body; an :class:`Assembler` makes an
``Outcome`` from a stream's server-sent events. A :class:`Reader` reads one
attempt's response body as the caller reads it, through a tee put on the
response's byte stream, and tells its :class:`Sink` (the call) how the
attempt ended: with the whole body, when the body broke, or when the caller
closed it unread.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import orjson

from .._hostkit import Guard
from .._messages import AssistantMessage, Usage
from .._model import Execution

GUARD = Guard("SDK instrumentor")
"""The never-raise policy of every SDK instrumentation in the process: each failure
counted, the first logged at ERROR with its traceback, later ones at DEBUG."""

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


class Sink(Protocol):
    """Where a reader reports: the call the attempt belongs to."""

    @property
    def endpoint(self) -> Endpoint:
        """The call's endpoint."""

    def end(
        self,
        ex: Execution,
        outcome: Outcome | None,
        error: Mapping[str, Any] | BaseException | None,
        http: Mapping[str, Any] | None = None,
    ) -> None:
        """The attempt ended."""

    def delta(self, ex: Execution, chunk: Any) -> None:
        """A streamed delta."""


def loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def body_text(raw: bytes) -> str:
    return raw[:_BODY_LIMIT].decode("utf-8", "replace")


def status_error(status: int, raw: bytes) -> dict[str, Any]:
    """The error of a response with an HTTP error status: the body as it came, JSON or not."""
    body = loads(raw) if len(raw) <= _BODY_LIMIT else None
    message = ""
    if isinstance(body, Mapping):
        inner = body.get("error")
        found = inner.get("message") if isinstance(inner, Mapping) else body.get("message")
        message = found if isinstance(found, str) else ""
    error: dict[str, Any] = {"type": str(status), "message": message, "status": status}
    if body is not None:
        error["body"] = body
    elif raw:
        error["body_text"] = body_text(raw)
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


class Reader:
    """Reads one attempt's response body along with the SDK, and ends the attempt."""

    __slots__ = ("_assembler", "_bytes", "_call", "_decoder", "_ex", "_http", "_sse", "_status")

    def __init__(self, call: Sink, ex: Execution, response: Any) -> None:
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
        body = loads(raw)
        if body is None:
            error = {"type": "InvalidResponse", "message": "the response body is not JSON"}
            self._http["body_text"] = body_text(raw)
            self._call.end(self._ex, None, error, self._http)
            return
        try:
            outcome = self._call.endpoint.response(body)
        except Exception:
            GUARD.failed(f"reading a {self._call.endpoint.provider} response")
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
            GUARD.failed(f"reading a streamed {self._call.endpoint.provider} body")
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
            GUARD.failed(f"assembling a {self._call.endpoint.provider} stream")
            return Outcome(complete=False)


_TEES: dict[type[Any], type[Any]] = {}


def stream_base(response: Any, *, asynchronous: bool) -> type[Any] | None:
    """The byte stream base class of the response's HTTP library (``httpx`` or ``httpx2``)."""
    module = sys.modules.get(type(response).__module__.partition(".")[0])
    name = "AsyncByteStream" if asynchronous else "SyncByteStream"
    base = getattr(module, name, None)
    return base if isinstance(base, type) else None


def tee_class(base: type[Any]) -> type[Any]:
    tee = _TEES.get(base)
    if tee is None:
        mixin = _AsyncTee if "Async" in base.__name__ else _SyncTee
        tee = _TEES[base] = type(f"Loopscribe{mixin.__name__}", (mixin, base), {})
    return tee


class _SyncTee:
    """A response byte stream that hands each chunk to a reader as the caller reads it."""

    def __init__(self, inner: Any, reader: Reader) -> None:
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
            GUARD.failed("ending a streamed call")

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._end_closed()

    def _end_closed(self) -> None:
        if not self._ended:
            self._ended = True
            with GUARD.contained("ending a stream the caller closed"):
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

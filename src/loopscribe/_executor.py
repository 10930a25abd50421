"""Standalone model calls: an executor that streams a model and publishes its facts.

``ModelExecutor.call(model, ModelExecution(...))`` always consumes the
model's stream and returns the final :class:`ModelResult`. On the way it
publishes, to ``on_event``, in this order:

1. ``model_exec_start``;
2. ``model_request`` — the final request after middleware (omitted when a
   middleware short-circuits);
3. ``model_route`` for each routed attempt, when a router picks among
   models; an attempt that fails and falls through to the next model is
   followed by a second ``model_route`` carrying its ``error`` and the
   ``partial_message`` received before it failed;
4. ``model_stream`` for each chunk (transient: a Session does not write it);
5. ``model_exec_end`` — the message, or the partial message and the error,
   and the provider state when the stream's :class:`StreamEnd` carries it.

A call interrupted from outside — ``asyncio`` cancellation, ``KeyboardInterrupt``,
``SystemExit`` — still ends with ``model_exec_end``, carrying that
cancellation as its error and the partial content, and then re-raises it.

A call adds no retries, commits no message (no ``message_end``) and
manufactures no ``agent_end``: completion is ``model_exec_end`` and its error.
The events of one call are published one at a time, in order; an
``on_event`` shared by concurrent calls must be safe for that, as
``Run.record`` is. Each event is stamped with the executor's ``clock`` when
it happens, so a recorded call spans the time the model took.

Inside an :class:`~loopscribe.AgentLoop` step (its own model calls, a
context transform, a tool, an after-run hook) a call made through *any*
executor belongs to the loop: it nests under the step's execution when it
names no parent, is stamped by the loop's clock, and each event goes to the
executor's ``on_event`` and onto the loop's stream, one right after the
other (see ``_Scope``).
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import AsyncIterable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeAlias

from . import events as ev
from ._hostkit import Guard
from ._messages import AssistantMessage, TextContent, ThinkingContent, ToolCall, Usage
from ._model import Event, Execution
from ._session import Run

logger = logging.getLogger("loopscribe")


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """What a model call sends: the conversation, the tool declarations and the config."""

    messages: Sequence[Any]
    tools: Sequence[Any] = ()
    config: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ModelExecution:
    """One model call: its execution coordinates and its request."""

    execution: Execution
    request: LLMRequest


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of response text (a plain ``str`` chunk means the same)."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A piece of reasoning text."""

    text: str


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The end of a stream: why it stopped, what it cost, which model answered.

    Attributes:
        provider_state: Opaque state the provider returns for the next call
            (a conversation or cache handle, encrypted reasoning, ...); it is
            recorded in ``model_exec_end`` and returned on the result.
        response_id: The provider's ID of the response.
    """

    stop_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    provider_state: Any = None
    response_id: str | None = None


Chunk: TypeAlias = str | TextDelta | ThinkingDelta | ToolCall | Usage | StreamEnd | AssistantMessage
"""What a model stream may yield. An ``AssistantMessage`` replaces what was accumulated."""


@dataclass(frozen=True, slots=True)
class ModelResult:
    """The outcome of one call.

    Attributes:
        message: The response; on failure, the partial content received before
            the error (diagnostic only: it is not a valid response).
        error: The failure, or ``None``.
        model: The model that answered (after routing).
        short_circuit: A middleware produced this result without calling a model.
        provider_state: What the stream's :class:`StreamEnd` carried, if anything.
    """

    message: AssistantMessage | None
    error: BaseException | None = None
    model: str | None = None
    short_circuit: bool = False
    provider_state: Any = None

    @property
    def ok(self) -> bool:
        """Whether the call succeeded."""
        return self.error is None

    def raise_error(self) -> None:
        """Raise the call's error, if it failed."""
        if self.error is not None:
            raise self.error


def _no_model() -> BaseException:
    return LookupError("the router chose no model to call")


Middleware = Callable[[LLMRequest], "LLMRequest | ModelResult"]
"""Rewrites a request (returns the new one) or short-circuits (returns a result)."""
Router = Callable[[Any, LLMRequest], Iterable[Any]]
"""Given the requested model and the request, the models to try, in order."""
OnEvent = Callable[[Event], object]
Clock = Callable[[], datetime]
"""Returns the current time as an aware datetime; events are stamped with it."""


def utc_now() -> datetime:
    """The default clock: now, in UTC."""
    return datetime.now(UTC)


class _Scope:
    """Where the model calls made inside one AgentLoop step belong.

    The loop installs one (in a context variable) while its own model call, a
    context transform, a tool or an after-run hook runs. A call made inside,
    through any executor, nests under ``parent`` when it names no parent of
    its own and is stamped by the loop's ``clock``; each of its events is
    handed here with that executor's ``on_event`` instead of being published.
    After the step the loop delivers each event to its observer and then
    yields it, one right after the other, so a host that records both the
    stream and the observer into one run has ``Run.record`` see the same
    Event object twice in a row (it writes it once). Once the step is over
    the scope is closed: a call still running on a thread the step left
    behind publishes as if no loop were there.
    """

    __slots__ = ("_lock", "_open", "_pending", "clock", "parent")

    def __init__(self, parent: Execution, clock: Clock) -> None:
        self.parent = parent
        self.clock = clock
        self._pending: list[tuple[Event, OnEvent | None]] = []
        self._open = True
        self._lock = threading.Lock()

    def take(self, event: Event, observer: OnEvent | None) -> bool:
        """Keep ``event`` for the loop; ``False`` once the step is over."""
        with self._lock:
            if self._open:
                self._pending.append((event, observer))
            return self._open

    def close(self) -> list[tuple[Event, OnEvent | None]]:
        """End the step: the events handed in, each with its observer, in order."""
        with self._lock:
            self._open = False
            pending, self._pending = self._pending, []
            return pending


_SCOPE: ContextVar[_Scope | None] = ContextVar("loopscribe_scope", default=None)


@dataclass(frozen=True, slots=True)
class _Out:
    """Where one call's events go, and the clock that stamps them."""

    observer: OnEvent | None
    clock: Clock
    scope: _Scope | None

    def __call__(self, event: Event) -> None:
        scope = self.scope
        if scope is not None and scope.take(event, self.observer):
            return
        if self.observer is not None:
            self.observer(event)


def model_name(model: Any) -> str:
    """A model's name for records and spans: ``name``, ``model`` or its class name."""
    for attribute in ("name", "model", "model_name"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__ if not inspect.isfunction(model) else model.__name__


def model_provider(model: Any) -> str | None:
    """A model's provider (``gen_ai.provider.name``), from its ``provider`` attribute."""
    provider = getattr(model, "provider", None)
    return provider if isinstance(provider, str) and provider else None


def _open_stream(model: Any, request: LLMRequest) -> Any:
    stream = getattr(model, "stream", None)
    if callable(stream):
        return stream(request)
    if callable(model):
        return model(request)
    raise TypeError(
        f"{type(model).__name__} is not a model: give an object with stream(request) "
        "or a callable(request) returning an iterator of chunks"
    )


@dataclass(slots=True)
class _Accumulator:
    """Builds the response message from chunks."""

    model: str
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    stop_reason: str | None = None
    final: AssistantMessage | None = None
    provider_state: Any = None
    response_id: str | None = None

    def add(self, chunk: Any) -> None:
        if isinstance(chunk, str):
            self.text.append(chunk)
        elif isinstance(chunk, TextDelta):
            self.text.append(chunk.text)
        elif isinstance(chunk, ThinkingDelta):
            self.thinking.append(chunk.text)
        elif isinstance(chunk, ToolCall):
            self.tool_calls.append(chunk)
        elif isinstance(chunk, Usage):
            self.usage = chunk
        elif isinstance(chunk, StreamEnd):
            self.stop_reason = chunk.stop_reason or self.stop_reason
            self.usage = chunk.usage or self.usage
            self.model = chunk.model or self.model
            if chunk.provider_state is not None:
                self.provider_state = chunk.provider_state
            self.response_id = chunk.response_id or self.response_id
        elif isinstance(chunk, AssistantMessage):
            self.final = chunk
        else:
            raise TypeError(f"a model stream yielded {type(chunk).__name__}, which is no chunk")

    def empty(self) -> bool:
        return not (self.text or self.thinking or self.tool_calls or self.final)

    def message(self, error: BaseException | None = None) -> AssistantMessage:
        if self.final is not None:
            return self.final
        content: list[Any] = []
        if self.thinking:
            content.append(ThinkingContent("".join(self.thinking)))
        if self.text:
            content.append(TextContent("".join(self.text)))
        content.extend(self.tool_calls)
        return AssistantMessage(
            tuple(content),
            model=self.model,
            usage=self.usage,
            stop_reason="error" if error is not None else self.stop_reason,
            error_message=None if error is None else type(error).__name__,
        )


class ModelExecutor:
    """Runs standalone model calls and publishes their facts to ``on_event``.

    Args:
        middlewares: Applied in order before the provider is called; each
            returns a rewritten :class:`LLMRequest` or a :class:`ModelResult`
            that short-circuits the call (no request or attempts are published).
        on_event: Receives every event (for example ``run.record`` wrapped by
            :class:`loopscribe.Recorder`), also those of the calls an
            :class:`~loopscribe.AgentLoop` makes through this executor, which
            its stream carries too: record one or the other. Shared across
            concurrent calls, it must be thread-safe.
        router: Picks the models to try; each is a routed attempt, published
            as ``model_route``, tried until one succeeds. Without a router the
            requested model is the only attempt.
        clock: Stamps each event when it happens (default: now, in UTC).
            Inside an AgentLoop step the loop's clock stamps them instead.
    """

    def __init__(
        self,
        middlewares: Sequence[Middleware] = (),
        on_event: OnEvent | None = None,
        router: Router | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.middlewares = tuple(middlewares)
        self.on_event = on_event
        self.router = router
        self.clock: Clock = clock or utc_now

    def _begin(self, call: ModelExecution) -> tuple[Execution, _Out]:
        """The call's execution (nested under the loop step it is made in) and its outlet."""
        ex = call.execution
        scope = _SCOPE.get()
        if scope is None:
            return ex, _Out(self.on_event, self.clock, None)
        if ex.parent_id is None:
            ex = Execution(ex.id, ex.kind, ex.attempt, scope.parent.id)
        return ex, _Out(self.on_event, scope.clock, scope)

    def _prepare(
        self, out: _Out, ex: Execution, model: Any, request: LLMRequest
    ) -> tuple[LLMRequest, ModelResult | None]:
        name = model_name(model)
        out(ev.model_exec_start(ex, name, provider=model_provider(model), timestamp=out.clock()))
        for middleware in self.middlewares:
            outcome = middleware(request)
            if isinstance(outcome, ModelResult):
                return request, replace(outcome, short_circuit=True)
            request = outcome
        out(
            ev.model_request(
                ex,
                request.messages,
                request.tools,
                request.config,
                model=name,
                timestamp=out.clock(),
            )
        )
        return request, None

    def _attempts(self, model: Any, request: LLMRequest) -> list[tuple[Any, bool]]:
        if self.router is None:
            return [(model, False)]
        return [(m, True) for m in self.router(model, request)]

    @staticmethod
    def _finish(
        out: _Out, ex: Execution, acc: _Accumulator, error: BaseException | None
    ) -> ModelResult:
        message = acc.message(error)
        if error is None:
            out(
                ev.model_exec_end(
                    ex,
                    message=message,
                    usage=acc.usage or message.usage,
                    model=message.model or acc.model,
                    stop_reason=message.stop_reason,
                    response_id=acc.response_id,
                    provider_state=acc.provider_state,
                    timestamp=out.clock(),
                )
            )
            return ModelResult(
                message, None, message.model or acc.model, provider_state=acc.provider_state
            )
        partial = None if acc.empty() else message
        out(
            ev.model_exec_end(
                ex,
                partial_message=partial,
                error=error,
                usage=acc.usage,
                model=acc.model,
                response_id=acc.response_id,
                provider_state=acc.provider_state,
                timestamp=out.clock(),
            )
        )
        return ModelResult(partial, error, acc.model, provider_state=acc.provider_state)

    @staticmethod
    def _fell_through(out: _Out, ex: Execution, acc: _Accumulator, error: BaseException) -> None:
        """A routed attempt failed and the router tries the next model: keep the evidence."""
        out(
            ev.model_route(
                ex,
                acc.model,
                reason="failed",
                error=error,
                partial_message=None if acc.empty() else acc.message(error),
                usage=acc.usage,
                timestamp=out.clock(),
            )
        )

    @classmethod
    def _cancelled(cls, out: _Out, ex: Execution, acc: _Accumulator, cancel: BaseException) -> None:
        """End an interrupted call on record before the interruption propagates."""
        try:
            cls._finish(out, ex, acc, cancel)
        except Exception:
            logger.exception("recording the end of a cancelled model call failed")

    @staticmethod
    def _short_circuit(out: _Out, ex: Execution, result: ModelResult) -> ModelResult:
        out(
            ev.model_exec_end(
                ex,
                message=result.message if result.error is None else None,
                partial_message=result.message if result.error is not None else None,
                error=result.error,
                model=result.model,
                timestamp=out.clock(),
            )
        )
        return result

    @staticmethod
    def _attempt(out: _Out, ex: Execution, candidate: Any, routed: bool) -> _Accumulator:
        acc = _Accumulator(model_name(candidate))
        if routed:
            out(ev.model_route(ex, acc.model, timestamp=out.clock()))
        return acc

    @staticmethod
    def _chunk(out: _Out, ex: Execution, acc: _Accumulator, chunk: Any) -> None:
        out(ev.model_stream(ex, chunk, timestamp=out.clock()))
        acc.add(chunk)

    def call(self, model: Any, call: ModelExecution) -> ModelResult:
        """Run one call to completion, consuming the model's (sync) stream.

        Returns:
            The result; on failure ``result.error`` is set and ``result.message``
            holds the partial content, if any. The call itself never raises a
            provider error.
        """
        ex, out = self._begin(call)
        request, short = self._prepare(out, ex, model, call.request)
        if short is not None:
            return self._short_circuit(out, ex, short)
        acc, error = _Accumulator(model_name(model)), _no_model()
        failed: _Accumulator | None = None
        try:
            for candidate, routed in self._attempts(model, request):
                if failed is not None:
                    self._fell_through(out, ex, failed, error)
                acc = self._attempt(out, ex, candidate, routed)
                try:
                    stream = _open_stream(candidate, request)
                    if isinstance(stream, AsyncIterable):
                        raise TypeError("this model streams asynchronously: use acall()")
                    for chunk in stream:
                        self._chunk(out, ex, acc, chunk)
                except Exception as exc:
                    error, failed = exc, (acc if routed else None)
                    continue
                return self._finish(out, ex, acc, None)
        except BaseException as cancel:  # KeyboardInterrupt, SystemExit, GeneratorExit
            self._cancelled(out, ex, acc, cancel)
            raise
        return self._finish(out, ex, acc, error)

    async def acall(self, model: Any, call: ModelExecution) -> ModelResult:
        """Like :meth:`call`, for models that stream asynchronously (or synchronously)."""
        ex, out = self._begin(call)
        request, short = self._prepare(out, ex, model, call.request)
        if short is not None:
            return self._short_circuit(out, ex, short)
        acc, error = _Accumulator(model_name(model)), _no_model()
        failed: _Accumulator | None = None
        try:
            for candidate, routed in self._attempts(model, request):
                if failed is not None:
                    self._fell_through(out, ex, failed, error)
                acc = self._attempt(out, ex, candidate, routed)
                try:
                    stream = _open_stream(candidate, request)
                    if inspect.isawaitable(stream):
                        stream = await stream
                    if isinstance(stream, AsyncIterable):
                        async for chunk in stream:
                            self._chunk(out, ex, acc, chunk)
                    else:
                        for chunk in stream:
                            self._chunk(out, ex, acc, chunk)
                except Exception as exc:
                    error, failed = exc, (acc if routed else None)
                    continue
                return self._finish(out, ex, acc, None)
        except BaseException as cancel:  # asyncio.CancelledError, KeyboardInterrupt, ...
            self._cancelled(out, ex, acc, cancel)
            raise
        return self._finish(out, ex, acc, error)


class Recorder:
    """An ``on_event`` that records into a run and never raises into the caller.

    The ways-in policy (:class:`loopscribe._hostkit.Guard`): every failure is
    counted in :attr:`failures`, the first is logged with its traceback at
    ERROR on the ``loopscribe`` logger, later ones at DEBUG. The error itself
    stays visible: a write or encoding failure is sticky, so
    ``run.session.error`` holds it and every later ``record`` and the
    Session's ``close()`` raise it again, which is where the host sees the
    gap. Thread-safe, because ``Run.record`` is.

    Args:
        run: The run to record into.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self._guard = Guard("recorder")

    @property
    def failures(self) -> int:
        """How many events could not be recorded."""
        return self._guard.errors

    def __call__(self, event: Event) -> None:
        """Record one event."""
        self._guard.record(self.run, event)

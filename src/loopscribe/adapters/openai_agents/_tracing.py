"""Record OpenAI Agents SDK runs from the SDK's own trace events (``add_trace_processor``).

The second path next to :class:`~loopscribe.adapters.openai_agents.LoopscribeHooks`:
a ``TracingProcessor`` that turns the spans the SDK traces into loopscribe
records, so the SDK's tracing stays on and nothing is passed to ``Runner``::

    from agents import add_trace_processor
    from loopscribe.adapters.openai_agents import LoopscribeTraceProcessor

    with Session.create("agent.jsonl") as session, session.begin_run() as run:
        processor = LoopscribeTraceProcessor(run)
        add_trace_processor(processor)
        await Runner.run(agent, "Weather in Lisbon?")
        processor.close()          # stop recording into this run

=======================  ===================================================
SDK span                 loopscribe
=======================  ===================================================
agent                    ``agent_N`` execution, nested under its parent span's
                         execution (a tool call for ``agent.as_tool()``)
response / generation    ``model_N``: request (instructions and input as
                         messages, tools, settings), response, usage, id
function                 a tool execution, id = the response's ``call_id``
handoff                  a ``handoff`` event on the agent
guardrail                ``guardrail_N``, kind ``guardrail``, under its agent
                         (name, whether it tripped; the span has no output info)
a retried model call     each response / generation span is one attempt of
                         the turn's ``model_N``, with ``retry_scheduled``
=======================  ===================================================

Limits, and why hooks are the default: the processor sees model calls only
through the spans the *model* emits. The SDK's OpenAI models emit them (with
inputs and outputs unless ``trace_include_sensitive_data`` is off), but a
custom or test model may emit none or empty ones; its calls are then
recorded without messages. A processor is global: it records every trace
the process runs until :meth:`LoopscribeTraceProcessor.close`, which ends
what its spans left open and removes it from the SDK's processors
(``install(run)`` registers one, ``uninstall()`` closes it).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agents.tracing import Span, Trace, TracingProcessor, get_trace_provider
from agents.tracing.provider import TraceProvider
from agents.tracing.span_data import (
    AgentSpanData,
    FunctionSpanData,
    GenerationSpanData,
    GuardrailSpanData,
    HandoffSpanData,
    ResponseSpanData,
    TurnSpanData,
)

from ... import events as ev
from ..._hostkit import Committed, Guard, close_left_open, run_ids
from ..._messages import SystemMessage
from ..._model import Event, Execution
from ..._session import Run
from ._messages import (
    assistant_message,
    from_chat_messages,
    from_items,
    stop_reason_of,
    usage_of,
)

__all__ = ["LoopscribeTraceProcessor"]


def _ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True, warnings=False) if callable(dump) else value


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class LoopscribeTraceProcessor(TracingProcessor):
    """A ``TracingProcessor`` that records the SDK's agent, model and tool spans into a ``Run``.

    Register it with ``agents.add_trace_processor``. It never raises into
    the SDK: failures are logged and counted in :attr:`errors`.

    Attributes:
        errors: How many spans could not be recorded.
    """

    def __init__(self, run: Run) -> None:
        """Record into ``run`` until :meth:`close`.

        Args:
            run: The loopscribe run to record into.
        """
        self._run = run
        self._lock = threading.Lock()
        self._open: dict[str, Execution] = {}
        # The trace and the name of each open span's execution, to close what is left open.
        self._opened_in: dict[str, tuple[str, str]] = {}
        # Spans with no execution of their own (task, custom, ...): their parent's execution.
        self._through: dict[str, Execution | None] = {}
        self._ids = run_ids(run)
        # Function calls each agent's last response asked for: (name, arguments) -> call ids.
        self._calls: dict[str | None, list[tuple[str, Any, str]]] = {}
        self._committed: dict[str, Committed[str]] = {}
        # The last failed model attempt of each turn, with its error, until a retry follows.
        self._failed: dict[str, tuple[Execution, dict[str, Any]]] = {}
        self._closed = False
        self._provider: TraceProvider | None = None
        self._guard = Guard("OpenAI Agents trace processor")

    def register(self) -> None:
        """Add this processor to the SDK's trace provider (``add_trace_processor``)."""
        provider = get_trace_provider()
        provider.register_processor(self)
        self._provider = provider

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran: the processor records nothing more."""
        return self._closed

    def close(self) -> None:
        """Stop recording: end what is still open, unregister, and ignore later spans.

        An agent, turn, tool or guardrail span that started and has not ended
        ends now with the toolkit's ``NotEnded`` error (``stop_reason``
        ``cancelled``). The processor is then removed from the SDK's trace
        provider (the one :meth:`register` used, else the current one), so it
        no longer sees every trace of the process. Never raises.
        """
        with self._lock:
            if not self._closed:
                with self._guard.contained("close"):
                    self._close_left_open(None)
            self._closed = True
        with self._guard.contained("unregistering"):
            _unregister(self._provider or get_trace_provider(), self)

    # -- TracingProcessor --------------------------------------------------------------

    def on_trace_start(self, trace: Trace) -> None:
        """A trace began: nothing to record until its spans."""

    def on_trace_end(self, trace: Trace) -> None:
        """A trace ended: forget what it committed."""
        with self._lock:
            self._committed.pop(trace.trace_id, None)
            if not self._closed:
                with self._guard.contained("trace end"):
                    self._close_left_open(trace.trace_id)

    def on_span_start(self, span: Span[Any]) -> None:
        """Open the execution of an agent or tool span."""
        self._guarded("span start", self._start, span)

    def on_span_end(self, span: Span[Any]) -> None:
        """Record what the span did: its execution's end, a model call, an event."""
        self._guarded("span end", self._end, span)

    def shutdown(self) -> None:
        """The SDK is shutting down: stop recording."""
        self.close()

    def force_flush(self) -> None:
        """Nothing is buffered: every record is written when its span ends."""

    # -- internals ---------------------------------------------------------------------

    def _guarded(self, what: str, method: Any, span: Span[Any]) -> None:
        try:
            with self._lock:
                if not self._closed:
                    method(span)
        except Exception:
            self._guard.failed(f"a {what}")

    @property
    def errors(self) -> int:
        """How many spans could not be recorded (the first was logged at ERROR)."""
        return self._guard.errors

    def _next(self, kind: str) -> int:
        return self._ids.number(kind)

    def _opened(self, span: Span[Any], ex: Execution, name: str) -> None:
        self._open[span.span_id] = ex
        self._opened_in[span.span_id] = (span.trace_id, name)

    def _close_left_open(self, trace_id: str | None) -> None:
        """End the executions of ``trace_id``'s spans (every trace's, for ``None``) still open."""
        left: list[tuple[Execution, str]] = []
        for span_id, (trace, name) in reversed(list(self._opened_in.items())):
            if trace_id is None or trace == trace_id:
                del self._opened_in[span_id]
                ex = self._open.pop(span_id, None)
                if ex is not None:
                    left.append((ex, name))
        close_left_open(self._guard, self._run, left)

    def _parent(self, span: Span[Any]) -> Execution | None:
        if not span.parent_id:
            return None
        found = self._open.get(span.parent_id)
        return found if found is not None else self._through.get(span.parent_id)

    def _agent_of(self, span: Span[Any]) -> Execution | None:
        parent = self._parent(span)
        if parent is not None and parent.kind == "turn":
            agent_id = parent.parent_id
            return next((e for e in self._open.values() if e.id == agent_id), parent)
        return parent

    def _start(self, span: Span[Any]) -> None:
        data = span.span_data
        parent = self._parent(span)
        parent_id = parent.id if parent is not None else None
        when = _ts(span.started_at)
        if isinstance(data, AgentSpanData):
            ex = Execution(f"agent_{self._next('agent')}", "agent", parent_id=parent_id)
            self._opened(span, ex, data.name)
            self._run.record(ev.agent_start(ex, data.name, timestamp=when))
        elif isinstance(data, TurnSpanData):
            ex = Execution(f"turn_{self._next('turn')}", "turn", parent_id=parent_id)
            self._opened(span, ex, str(data.turn))
            self._run.record(ev.turn_start(ex, data.turn, timestamp=when))
        elif isinstance(data, FunctionSpanData):
            # The span's input arrives when it ends; the model's call names it already.
            call = self._call(parent_id, data.name)
            call_id, args = call if call is not None else (None, None)
            if call_id:
                ex = self._ids.call(call_id, "tool", parent_id)
            else:
                ex = Execution(f"tool_{self._next('tool')}", "tool", parent_id=parent_id)
            self._opened(span, ex, data.name)
            self._run.record(
                ev.tool_exec_start(ex, data.name, args, tool_type="function", timestamp=when)
            )
        elif isinstance(data, GuardrailSpanData):
            owner = self._agent_of(span)
            ex = Execution(
                f"guardrail_{self._next('guardrail')}",
                "guardrail",
                parent_id=owner.id if owner is not None else None,
            )
            self._opened(span, ex, data.name)
            self._run.record(ev.guardrail_start(ex, data.name, timestamp=when))
        elif not isinstance(data, ResponseSpanData | GenerationSpanData):
            self._through[span.span_id] = parent

    def _call(self, parent: str | None, name: str) -> tuple[str, Any] | None:
        """The function call a tool span runs: the first one asked for by that name."""
        waiting = self._calls.get(parent, [])
        for i, (call_name, call_args, call_id) in enumerate(waiting):
            if call_name == name:
                del waiting[i]
                return call_id, call_args
        return None

    def _end(self, span: Span[Any]) -> None:
        data = span.span_data
        when = _ts(span.ended_at)
        error = span.error
        self._through.pop(span.span_id, None)
        self._opened_in.pop(span.span_id, None)
        if isinstance(data, AgentSpanData | FunctionSpanData | TurnSpanData):
            ex = self._open.pop(span.span_id, None)
            if ex is None:
                return
            failure = None if error is None else {"type": "Error", "message": error["message"]}
            if isinstance(data, AgentSpanData):
                self._run.record(ev.agent_end(ex, data.name, error=failure, timestamp=when))
            elif isinstance(data, TurnSpanData):
                self._run.record(ev.turn_end(ex, data.turn, error=failure, timestamp=when))
            else:
                self._run.record(
                    ev.tool_exec_end(
                        ex, data.name, _arguments(data.output), error=failure, timestamp=when
                    )
                )
        elif isinstance(data, ResponseSpanData):
            self._response(span, data)
        elif isinstance(data, GenerationSpanData):
            self._generation(span, data)
        elif isinstance(data, HandoffSpanData):
            owner = self._agent_of(span)
            handoff = {"from_agent": data.from_agent, "to_agent": data.to_agent}
            self._run.record(Event("handoff", owner, handoff, when))
        elif isinstance(data, GuardrailSpanData):
            ex = self._open.pop(span.span_id, None)
            if ex is not None:
                failure = None if error is None else {"type": "Error", "message": error["message"]}
                self._run.record(
                    ev.guardrail_end(
                        ex, data.name, triggered=data.triggered, error=failure, timestamp=when
                    )
                )

    def _model(self, span: Span[Any]) -> Execution:
        """The model execution of a response or generation span: a new call, or a retry.

        The SDK makes one model call per turn; a second model span in the same
        turn after a failed one is the SDK's retry policy trying again (each
        attempt is a span of its own), so it is the next attempt of that call.
        """
        parent = self._parent(span)
        parent_id = parent.id if parent else None
        failed = self._failed.pop(parent_id, None) if parent_id is not None else None
        if failed is not None:
            ex, error = failed
            retry = Execution(ex.id, ex.kind, ex.attempt + 1, ex.parent_id)
            self._run.record(
                ev.retry_scheduled(
                    ex, next_attempt=retry.attempt, error=error, timestamp=_ts(span.started_at)
                )
            )
            return retry
        number = self._next("model")
        return Execution(f"model_{number}", "model", parent_id=parent_id)

    def _model_failed(self, ex: Execution, error: dict[str, Any]) -> None:
        """Remember a failed attempt: a model span that follows in its turn retries it."""
        if ex.parent_id is not None:
            self._failed[ex.parent_id] = (ex, error)

    def _commit_input(self, span: Span[Any], messages: list[Any]) -> None:
        """Commit input messages this trace has not committed: user input, tool results."""
        committed = self._committed.setdefault(span.trace_id, Committed())
        owner = self._parent(span)
        seen: Counter[str] = Counter()
        for message in messages:
            role = getattr(message, "role", None)
            if role not in ("user", "tool"):
                continue
            key = repr(message)
            seen[key] += 1
            numbered = f"{seen[key]}:{key}"
            if committed.first(numbered):
                self._run.record(ev.message_end(owner, message, timestamp=_ts(span.started_at)))

    def _response(self, span: Span[Any], data: ResponseSpanData) -> None:
        response = data.response
        ex = self._model(span)
        started, ended = _ts(span.started_at), _ts(span.ended_at)
        model = response.model if response is not None else "unknown"
        self._run.record(
            ev.model_exec_start(ex, model, provider="openai", stream=None, timestamp=started)
        )
        messages: list[Any] = []
        if response is not None and isinstance(response.instructions, str):
            messages.append(SystemMessage(response.instructions))
        raw_input = data.input
        items = [{"role": "user", "content": raw_input}] if isinstance(raw_input, str) else []
        if isinstance(raw_input, list):
            items = [_dump(item) for item in raw_input]
        messages.extend(from_items(items))
        tools = [_dump(tool) for tool in response.tools] if response is not None else []
        config: dict[str, Any] = {}
        if response is not None:
            config = {
                "temperature": response.temperature,
                "top_p": response.top_p,
                "max_tokens": response.max_output_tokens,
            }
        self._run.record(
            ev.model_request(
                ex,
                messages,
                tools,
                {k: v for k, v in config.items() if v is not None},
                model=model,
                codec=self._run.session.codec,
                timestamp=started,
            )
        )
        self._commit_input(span, messages)
        if response is None:
            failure = _failure(span.error)
            self._run.record(ev.model_exec_end(ex, error=failure, timestamp=ended))
            self._model_failed(ex, failure)
            return
        output = [_dump(item) for item in response.output]
        stop = stop_reason_of(output)
        usage = usage_of(response.usage)
        message = assistant_message(
            output,
            usage=usage,
            response_id=response.id,
            model=response.model,
            provider="openai",
            stop_reason=stop,
        )
        agent = self._parent(span)
        self._calls[agent.id if agent else None] = [
            (str(item.get("name")), _arguments(item.get("arguments")), str(item.get("call_id")))
            for item in output
            if item.get("type") == "function_call"
        ]
        self._run.record(
            ev.model_exec_end(
                ex,
                message=message,
                usage=usage,
                model=response.model,
                stop_reason=stop,
                response_id=response.id,
                timestamp=ended,
            )
        )
        for committed in message if isinstance(message, list) else [message]:
            self._run.record(ev.message_end(ex, committed, timestamp=ended))

    def _generation(self, span: Span[Any], data: GenerationSpanData) -> None:
        ex = self._model(span)
        started, ended = _ts(span.started_at), _ts(span.ended_at)
        model = data.model or "unknown"
        self._run.record(ev.model_exec_start(ex, model, provider="openai", timestamp=started))
        messages = from_chat_messages(data.input or [])
        config = dict(data.model_config or {})
        self._run.record(
            ev.model_request(
                ex,
                messages,
                (),
                config,
                model=model,
                codec=self._run.session.codec,
                timestamp=started,
            )
        )
        self._commit_input(span, messages)
        output = from_chat_messages(data.output or [])
        usage_data = data.usage if isinstance(data.usage, Mapping) else {}
        usage = usage_of(_Usage(usage_data)) if usage_data else None
        if span.error is not None:
            failure = _failure(span.error)
            self._run.record(ev.model_exec_end(ex, error=failure, timestamp=ended))
            self._model_failed(ex, failure)
            return
        message = output[0] if len(output) == 1 else output
        self._run.record(ev.model_exec_end(ex, message=message, usage=usage, timestamp=ended))
        for committed in output:
            self._run.record(ev.message_end(ex, committed, timestamp=ended))


def _unregister(provider: TraceProvider, processor: TracingProcessor) -> None:
    """Remove ``processor`` from ``provider``'s list, keeping every other processor.

    The SDK has ``set_trace_processors`` (replace the list) and no getter of
    the list: the default provider keeps it in its multi-processor, read
    here; a provider of another shape keeps the processor, which is closed.
    """
    multi = getattr(provider, "_multi_processor", None)
    current = getattr(multi, "_processors", None)
    if isinstance(current, tuple) and any(p is processor for p in current):
        provider.set_processors([p for p in current if p is not processor])


def _failure(error: Mapping[str, Any] | None) -> dict[str, Any]:
    """A span's error as a record's ``error``: its type when the span names it, and its message.

    The SDK's spans carry ``{"message": ..., "data": {...}}``: the testing
    models put the exception's class in ``data.name`` and its text in
    ``data.message``; the OpenAI models put the text in ``data.error``.
    """
    if error is None:
        return {"type": "Error", "message": "no response"}
    data = error.get("data")
    data = data if isinstance(data, Mapping) else {}
    name = data.get("name")
    kind = name if isinstance(name, str) and name.isidentifier() else "Error"
    detail = data.get("message") or data.get("error")
    message = str(error.get("message", ""))
    if isinstance(detail, str) and detail:
        message = f"{message}: {detail}" if message else detail
    return {"type": kind, "message": message}


class _Usage:
    """A generation span's usage dict, read like the SDK's ``Usage``."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.input_tokens = data.get("input_tokens", 0)
        self.output_tokens = data.get("output_tokens", 0)

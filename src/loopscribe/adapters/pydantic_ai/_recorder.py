"""The pydantic-ai capability: per-run state, no conversion code (see ``_messages``)."""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import json
import threading
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_ai import DeferredToolRequests, RunContext
from pydantic_ai.capabilities import (
    AbstractCapability,
    CapabilityOrdering,
    RawToolArgs,
    ValidatedToolArgs,
    WrapModelRequestHandler,
    WrapRunHandler,
    WrapToolExecuteHandler,
    WrapToolValidateHandler,
)
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
    ToolReturnPart,
    tool_return_ta,
)
from pydantic_ai.models import (
    Model,
    ModelRequestContext,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from ... import events as ev
from ..._freeze import snapshot_error
from ..._hostkit import Guard, run_ids
from ..._messages import SystemMessage
from ..._model import Event, Execution
from ..._session import Run
from ._messages import from_pydantic_ai, provider_name, usage_of

__all__ = ["LoopscribeCapability"]


@functools.cache
def _adapters() -> tuple[TypeAdapter[ModelRequestParameters], TypeAdapter[list[ToolDefinition]]]:
    # Built on first use: schema building is not free, and importing the adapter should be.
    return TypeAdapter(ModelRequestParameters), TypeAdapter(list[ToolDefinition])


# Declared in `ModelRequestParameters` and written to `model_request.tools` instead of its config.
_TOOL_FIELDS = frozenset({"function_tools", "output_tools", "native_tools"})

# The exception behind a ToolRetryError, by the cause pydantic-ai records for the retry.
_RETRY_CAUSES = {
    "model_retry": "ModelRetry",
    "validation_error": "ValidationError",
    "unknown_tool": "UnknownTool",
    "unavailable_tool": "UnavailableTool",
}

# The tool call running on this task, so a delegate agent run started inside a
# tool nests under it. Keyed by the shared recorder: a delegate recorded into
# another loopscribe Run cannot name a parent in this one.
_CURRENT_TOOL: contextvars.ContextVar[tuple[_Shared, str] | None] = contextvars.ContextVar(
    "loopscribe_pydantic_ai_tool", default=None
)


# -- lowering pydantic-ai objects to plain JSON ----------------------------------------


def _request_messages(messages: Sequence[ModelMessage]) -> list[Any]:
    """What the model is sent, as loopscribe messages: the latest instructions first."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), default=-1)
    out: list[Any] = []
    for i, message in enumerate(messages):
        converted = from_pydantic_ai(message, instructions=i == last)
        if i == last and converted and isinstance(converted[0], SystemMessage):
            # The model reads the instructions before the conversation.
            out.insert(0, converted.pop(0))
        out.extend(converted)
    return out


def _response_message(response: ModelResponse) -> Any:
    converted = from_pydantic_ai(response)
    return converted[0] if len(converted) == 1 else converted


def _lower(value: Any) -> Any:
    """Any tool argument or return value as JSON-compatible data, the way pydantic-ai sends it."""
    try:
        return tool_return_ta.dump_python(value, mode="json")
    except Exception as exc:
        return snapshot_error(value, exc)


def _lower_args(args: RawToolArgs | None) -> Any:
    """The model's arguments: JSON text as the object it encodes, text that is no JSON as is."""
    if isinstance(args, str):
        try:
            return json.loads(args) if args.strip() else {}
        except ValueError:
            return args
    return _lower(args)


def _tools(parameters: ModelRequestParameters) -> list[Any]:
    tools: list[Any] = []
    for definitions in (parameters.function_tools, parameters.output_tools):
        try:
            tools.extend(_adapters()[1].dump_python(list(definitions), mode="json"))
        except Exception as exc:
            tools.append(snapshot_error(definitions, exc))
    for native in parameters.native_tools:
        tools.append(_lower(native))
    return tools


def _config(settings: ModelSettings | None, parameters: ModelRequestParameters) -> dict[str, Any]:
    config: dict[str, Any] = dict(settings or {})
    if "stop_sequences" in config:
        config["stop"] = config.pop("stop_sequences")
    try:
        lowered = _adapters()[0].dump_python(parameters, mode="json")
        config["request_parameters"] = {k: v for k, v in lowered.items() if k not in _TOOL_FIELDS}
    except Exception as exc:
        config["request_parameters"] = snapshot_error(parameters, exc)
    return config


def _with(event: Event, **extra: Any) -> Event:
    """``event`` with more data fields; ``None`` values are left out, as the constructors do."""
    data = dict(event.data)
    data.update({k: v for k, v in extra.items() if v is not None})
    return Event(event.type, event.execution, data, event.timestamp)


def _error_of(exc: BaseException) -> dict[str, Any]:
    """The error as recorded: the exception the tool raised, not pydantic-ai's carrier for it."""
    kind = type(exc).__qualname__
    if isinstance(exc, ToolRetryError):
        retry = exc.tool_retry.retry
        kind = _RETRY_CAUSES.get(retry.cause if retry is not None else "", kind)
    elif isinstance(exc, ToolFailedError):
        kind = "ToolFailed"
    return {"type": kind, "message": str(exc)}


# -- state -------------------------------------------------------------------------------


class _Shared:
    """State of one capability instance, shared by its per-agent-run copies: one loopscribe Run."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.guard = Guard("pydantic-ai capability")
        self.lock = threading.Lock()
        # Execution-id counters and call attempts of the Run, shared by every way in.
        self.ids = run_ids(run)

    def next_tool_attempt(self, call_id: str) -> int:
        """The attempt of a tool call: a call id seen again in the run is its next attempt."""
        return self.ids.attempt(call_id)


@dataclass(slots=True)
class _ModelAttempt:
    execution: Execution
    recorded: bool = False
    ended: bool = False
    error: dict[str, Any] | None = None


@dataclass(slots=True)
class _ToolCall:
    execution: Execution
    name: str
    step: int
    retry: int = 0
    max_retries: int = 0
    ended: bool = False
    error: dict[str, Any] | None = None
    running: bool = False
    """The tool function was called (``wrap_tool_execute``) and has not returned."""


@dataclass(slots=True)
class _AgentRun:
    """What one pydantic-ai run has recorded so far."""

    agent: Execution
    name: str
    run_id: str | None
    history: list[ModelMessage]
    # Messages already written (or committed before this run), by identity. The
    # values keep them alive, so an ID is never reused by a new message.
    seen: dict[int, ModelMessage] = field(default_factory=dict)
    responses: dict[int, Execution] = field(default_factory=dict)
    turn: Execution | None = None
    turn_number: int = 0
    turns: int = 0
    turn_tool_calls: int = 0
    turn_stop_reason: str | None = None
    model: _ModelAttempt | None = None
    last_model: Execution | None = None
    last_stop_reason: str | None = None
    tools: dict[str, _ToolCall] = field(default_factory=dict)

    def mark_seen(self, messages: Iterable[ModelMessage]) -> None:
        for message in messages:
            self.seen[id(message)] = message


# -- the model boundary --------------------------------------------------------------------


class _RecordingModel(WrapperModel):
    """The innermost wrapper around the model serving one attempt: sees exactly what it is sent."""

    def __init__(self, wrapped: Model, recorder: LoopscribeCapability, attempt: _ModelAttempt):
        super().__init__(wrapped)
        self._recorder = recorder
        self._attempt = attempt

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        self._recorder._model_started(
            self._attempt, self.wrapped, messages, model_settings, model_request_parameters, False
        )
        try:
            response = await super().request(messages, model_settings, model_request_parameters)
        except BaseException as exc:
            self._recorder._model_ended(self._attempt, None, exc)
            raise
        self._recorder._model_ended(self._attempt, response, None)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        self._recorder._model_started(
            self._attempt, self.wrapped, messages, model_settings, model_request_parameters, True
        )
        stream: StreamedResponse | None = None
        try:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                self._tap(stream)
                yield stream
        except BaseException as exc:
            self._recorder._model_ended(self._attempt, _partial(stream), exc)
            raise
        self._recorder._model_ended(self._attempt, _partial(stream), None)

    def _tap(self, stream: StreamedResponse) -> None:
        """Publish the stream's deltas as it is read, without changing what it yields.

        pydantic-ai builds the events it hands on from the response's own
        ``_get_event_iterator()`` the first time the stream is iterated; the
        instance's iterator is wrapped once, before that.
        """
        try:
            if getattr(stream, "_event_iterator", None) is not None:
                return  # already being read: its events are not ours to see
            source = stream._get_event_iterator
            recorder, execution = self._recorder, self._attempt.execution

            async def tapped() -> AsyncIterator[ModelResponseStreamEvent]:
                async for event in source():
                    recorder._delta(execution, event)
                    yield event

            stream._get_event_iterator = tapped  # type: ignore[method-assign]
        except Exception:
            self._recorder._failed("a model stream")


def _delta_of(event: ModelResponseStreamEvent) -> Any:
    """A stream event's new content: text as a string, thinking and tool calls as dicts."""
    if isinstance(event, PartStartEvent):
        part: Any = event.part
        if isinstance(part, TextPart):
            return part.content or None
        if isinstance(part, ThinkingPart):
            return {"type": "thinking", "text": part.content} if part.content else None
        if isinstance(part, ToolCallPart):
            call = {"type": "tool_call", "id": part.tool_call_id, "name": part.tool_name}
            args = part.args if isinstance(part.args, str) else _lower(part.args)
            return {**call, "args": args} if args else call
        return None
    if isinstance(event, PartDeltaEvent):
        change: Any = event.delta
        if isinstance(change, TextPartDelta):
            return change.content_delta or None
        if isinstance(change, ThinkingPartDelta):
            text = change.content_delta
            return {"type": "thinking", "text": text} if text else None
        if isinstance(change, ToolCallPartDelta):
            args = change.args_delta
            fields = {
                "type": "tool_call",
                "id": change.tool_call_id,
                "name": change.tool_name_delta,
                "args": args if isinstance(args, str) else _lower(args),
            }
            return {k: v for k, v in fields.items() if v}
    return None


def _partial(stream: StreamedResponse | None) -> ModelResponse | None:
    if stream is None:
        return None
    try:
        return stream.get()
    except Exception:
        return None


# -- the capability --------------------------------------------------------------------------


@dataclass
class LoopscribeCapability(AbstractCapability[Any]):
    """A pydantic-ai capability that records agent runs into a loopscribe ``Run``.

    Pass it per run, ``agent.run(..., capabilities=[LoopscribeCapability(run)])``,
    or to ``Agent(capabilities=[...])`` when every run of the agent goes to
    the same loopscribe Run. Several agent runs (a multi-turn conversation, a
    delegate agent called from a tool) may share one loopscribe Run: each gets
    its own ``{name}_{n}`` execution. The capability places itself innermost,
    so it records the request after every other capability changed it and
    the response before any of them did.

    Args:
        run: The open loopscribe Run to record into; the host opens and closes it.
        checkpoints: After each top-level agent run that finishes, write a
            loopscribe ``checkpoint`` (``Run.save_checkpoint``, which fsyncs)
            saying where the conversation stands: how many messages its
            history holds (``result.all_messages()``, every one committed in
            the file by then), how many this run added, the agent, pydantic-ai's
            ``run_id`` and ``conversation_id``. Off by default: each checkpoint
            costs an fsync.
    """

    run: Run
    checkpoints: bool = False
    _shared: _Shared = field(init=False, repr=False, compare=False)
    _active: _AgentRun | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._shared = _Shared(self.run)

    @property
    def errors(self) -> int:
        """How many recording failures were logged and swallowed, over all runs recorded."""
        return self._shared.guard.errors

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not constructible from an agent spec: it needs a live ``Run``."""
        return None

    def get_ordering(self) -> CapabilityOrdering:
        """Innermost: see the request as it is sent and the response as it comes back."""
        return CapabilityOrdering(position="innermost")

    async def for_run(self, ctx: RunContext[Any]) -> LoopscribeCapability:
        """A copy for one agent run, sharing the loopscribe Run and its counters."""
        bound = copy.copy(self)
        bound._active = None
        return bound

    # -- failure handling ----------------------------------------------------------------

    def _failed(self, where: str) -> None:
        """Count and log the recording failure being handled; never raise."""
        self._shared.guard.failed(where)

    def _delta(self, execution: Execution, event: ModelResponseStreamEvent) -> None:
        """Hand one streamed delta to live subscribers (transient: never written)."""
        try:
            delta = _delta_of(event)
            if delta is not None and delta != {"type": "tool_call"}:
                self._record(ev.message_update(execution, None, delta=delta))
        except Exception:
            self._failed("a stream delta")

    def _record(self, event: Event) -> None:
        self._shared.run.record(event)

    # -- run -----------------------------------------------------------------------------

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Record ``agent_start`` and ``agent_end`` around the whole run."""
        try:
            self._begin_run(ctx)
        except Exception:
            self._failed("wrap_run")
        result: AgentRunResult[Any] | None = None
        try:
            result = await handler()
        except BaseException as exc:
            try:
                self._end_run(None, exc)
            except Exception:
                self._failed("wrap_run")
            raise
        try:
            self._end_run(result, None)
        except Exception:
            self._failed("wrap_run")
        return result

    def _begin_run(self, ctx: RunContext[Any]) -> None:
        current = _CURRENT_TOOL.get()
        parent = current[1] if current is not None and current[0] is self._shared else None
        name = (ctx.agent.name if ctx.agent is not None else None) or "agent"
        # Named after the agent (slashes would read as the turn and model separator).
        label = name.replace("/", "_")
        agent = Execution(f"{label}_{self._shared.ids.number('agent')}", "agent", parent_id=parent)
        state = _AgentRun(agent, name, ctx.run_id, ctx.messages)
        # Messages passed in as history were committed by an earlier run.
        state.mark_seen(ctx.messages)
        self._active = state
        self._record(
            _with(
                ev.agent_start(agent, name),
                run_id=ctx.run_id,
                conversation_id=ctx.conversation_id,
            )
        )

    def _end_run(self, result: AgentRunResult[Any] | None, error: BaseException | None) -> None:
        state = self._active
        if state is None:
            return
        history = state.history
        if result is not None:
            try:
                history = result.all_messages()
            except Exception:
                self._failed("wrap_run")
        if state.model is not None and state.model.recorded and not state.model.ended:
            self._model_ended(state.model, None, error or _NotFinished("the run ended first"))
        deferred = _deferred(result)
        for call in list(state.tools.values()):
            if call.running and not call.ended:
                # The run ended (cancelled, or a sibling tool failed) while the tool ran:
                # pydantic-ai cancels it after this hook, so it never reports back itself.
                cancelled = error if isinstance(error, asyncio.CancelledError) else None
                self._end_tool(
                    call, error=cancelled or asyncio.CancelledError("the run ended while it ran")
                )
            elif not call.ended:
                reason = deferred.get(call.execution.id)
                self._end_tool(
                    call,
                    disposition="not_executed" if reason is None else "deferred",
                    details=None if reason is None else {"reason": reason},
                )
        self._flush(state, history)
        self._end_turn(state)
        output = None
        if result is not None:
            output = _lower(result.output)
        stop_reason = state.last_stop_reason if error is None else None
        self._record(
            _with(
                ev.agent_end(
                    state.agent, state.name, stop_reason=stop_reason, error=error, turns=state.turns
                ),
                output=output,
            )
        )
        if self.checkpoints and result is not None and state.agent.parent_id is None:
            self._checkpoint(state, result)

    def _checkpoint(self, state: _AgentRun, result: AgentRunResult[Any]) -> None:
        """Where the conversation stands after a finished run: what a host resumes from."""
        try:
            snapshot: dict[str, Any] = {
                "framework": "pydantic-ai",
                "agent": state.name,
                "execution": state.agent.id,
                "messages": len(result.all_messages()),
                "new_messages": len(result.new_messages()),
            }
            for key in ("run_id", "conversation_id"):
                value = getattr(result, key, None)
                if isinstance(value, str):
                    snapshot[key] = value
            self._shared.run.save_checkpoint(snapshot)
        except Exception:
            self._failed("a checkpoint")

    # -- turns and committed messages ------------------------------------------------------

    def _flush(
        self, state: _AgentRun, history: Sequence[ModelMessage], *, responses_only: bool = False
    ) -> None:
        """Write ``message_end`` for every message committed since the last flush.

        With ``responses_only``, requests are left for a later flush: a turn
        that ends writes its model's response, and the next turn the request
        that carries the tool results to the model.
        """
        for message in history:
            if id(message) in state.seen:
                continue
            if responses_only and not isinstance(message, ModelResponse):
                continue
            state.seen[id(message)] = message
            if message.run_id is not None and message.run_id != state.run_id:
                # A copy of a message an earlier run committed (pydantic-ai copies
                # history, e.g. when resuming deferred tool calls).
                continue
            execution: Execution = state.turn or state.agent
            if isinstance(message, ModelResponse):
                execution = state.responses.get(id(message)) or state.last_model or execution
            for converted in from_pydantic_ai(message):
                self._record(ev.message_end(execution, converted))

    def _end_turn(self, state: _AgentRun) -> None:
        if state.turn is None:
            return
        self._record(
            ev.turn_end(
                state.turn,
                state.turn_number,
                stop_reason=state.turn_stop_reason,
                tool_calls=state.turn_tool_calls,
            )
        )
        state.turn = None

    def _turn_for(self, state: _AgentRun, step: int) -> Execution:
        return Execution(f"{state.agent.id}/turn_{step}", "turn", parent_id=state.agent.id)

    # -- model requests --------------------------------------------------------------------

    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        """Open the turn of this request step; close an attempt the model boundary left open."""
        try:
            self._begin_step(ctx)
        except Exception:
            self._failed("wrap_model_request")
        try:
            response = await handler(request_context)
        except BaseException as exc:
            try:
                state = self._active
                if state is not None and state.model is not None and not state.model.ended:
                    self._model_ended(state.model, None, exc)
            except Exception:
                self._failed("wrap_model_request")
            raise
        return response

    def _begin_step(self, ctx: RunContext[Any]) -> None:
        state = self._active
        if state is None:
            return
        state.history = ctx.messages
        if state.turn is not None and state.turn_number == ctx.run_step:
            return
        self._flush(state, ctx.messages, responses_only=True)
        self._end_turn(state)
        state.turn = self._turn_for(state, ctx.run_step)
        state.turn_number = ctx.run_step
        state.turns += 1
        state.turn_tool_calls = 0
        state.turn_stop_reason = None
        state.model = None
        self._record(ev.turn_start(state.turn, ctx.run_step))

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Note which attempt is about to be sent; announce it when it retries an earlier one."""
        try:
            self._prepare_attempt(ctx, request_context)
        except Exception:
            self._failed("prepare_model_request")
        return request_context

    def _prepare_attempt(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> None:
        state = self._active
        if state is None:
            return
        if state.turn is None or state.turn_number != ctx.run_step:
            self._begin_step(ctx)
        state.history = ctx.messages
        # The step's request is in the history now, after the before-hooks ran.
        self._flush(state, ctx.messages)
        previous = state.model
        execution = Execution(
            f"{state.agent.id}/model_{ctx.run_step}",
            "model",
            attempt=request_context.attempt,
            parent_id=state.turn.id if state.turn is not None else state.agent.id,
        )
        if previous is not None and previous.recorded:
            if not previous.ended:
                # A capability rejected the attempt before it returned.
                self._model_ended(previous, None, _NotFinished("another attempt was started"))
            self._record(
                ev.retry_scheduled(
                    previous.execution,
                    next_attempt=execution.attempt,
                    error=previous.error or {"type": "RetryModelRequest", "message": ""},
                )
            )
        state.model = _ModelAttempt(execution)

    def get_wrapper_model(self, model: Model) -> Model | None:
        """Wrap the serving model, innermost, to record the attempt at the model boundary."""
        state = self._active
        if state is None or state.model is None or state.model.recorded:
            return None
        try:
            return _RecordingModel(model, self, state.model)
        except Exception:
            self._failed("get_wrapper_model")
            return None

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        """Record the attempt here if another wrapper kept it from reaching ours."""
        try:
            state = self._active
            if state is not None and state.model is not None:
                attempt = state.model
                if not attempt.recorded:
                    self._model_started(
                        attempt,
                        request_context.model,
                        request_context.messages,
                        request_context.model_settings,
                        request_context.model_request_parameters,
                    )
                if not attempt.ended:
                    self._model_ended(attempt, response, None)
                state.responses[id(response)] = attempt.execution
        except Exception:
            self._failed("after_model_request")
        return response

    def _model_started(
        self,
        attempt: _ModelAttempt,
        model: Model,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        stream: bool | None = None,
    ) -> None:
        if attempt.recorded:
            # A continuation of a suspended response: the same attempt goes on.
            return
        attempt.recorded = True
        try:
            ex = attempt.execution
            name = model.model_name
            self._record(
                ev.model_exec_start(ex, name, provider=provider_name(model.system), stream=stream)
            )
            self._record(
                ev.model_request(
                    ex,
                    _request_messages(messages),
                    _tools(parameters),
                    _config(settings, parameters),
                    model=name,
                )
            )
        except Exception:
            self._failed("model request")

    def _model_ended(
        self, attempt: _ModelAttempt, response: ModelResponse | None, error: BaseException | None
    ) -> None:
        if attempt.ended or not attempt.recorded:
            return
        if error is None and response is not None and response.state == "suspended":
            # The provider paused the response; it is continued within this attempt.
            return
        attempt.ended = True
        try:
            state = self._active
            message = None if response is None else _response_message(response)
            usage = None if response is None else usage_of(response.usage)
            if error is not None:
                attempt.error = _error_of(error)
                self._record(
                    ev.model_exec_end(
                        attempt.execution,
                        partial_message=message,
                        error=error,
                        usage=usage,
                        model=None if response is None else response.model_name,
                    )
                )
                return
            assert response is not None
            stop_reason = response.finish_reason
            if state is not None:
                state.last_model = attempt.execution
                state.last_stop_reason = state.turn_stop_reason = stop_reason
                state.responses[id(response)] = attempt.execution
            self._record(
                ev.model_exec_end(
                    attempt.execution,
                    message=message,
                    usage=usage,
                    model=response.model_name,
                    stop_reason=stop_reason,
                    response_id=response.provider_response_id,
                    provider_state=_provider_state(response),
                )
            )
        except Exception:
            self._failed("model response")

    # -- tools ------------------------------------------------------------------------------

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        """Record ``tool_exec_start`` with the model's arguments; end the call if refused."""
        tool: _ToolCall | None = None
        try:
            tool = self._start_tool(ctx, call, args)
        except Exception:
            self._failed("wrap_tool_validate")
        try:
            return await handler(args)
        except BaseException as exc:
            try:
                if tool is not None:
                    self._end_tool(tool, error=exc)
            except Exception:
                self._failed("wrap_tool_validate")
            raise

    async def before_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
    ) -> ValidatedToolArgs:
        """Record ``tool_invoke_start`` with the arguments the tool function gets."""
        try:
            state = self._active
            tool = None if state is None else state.tools.get(self._call_id(call))
            if tool is not None and not tool.ended:
                self._record(ev.tool_invoke_start(tool.execution, call.tool_name, _lower(args)))
        except Exception:
            self._failed("before_tool_execute")
        return args

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Record the tool's result or failure as ``tool_exec_end``."""
        tool: _ToolCall | None = None
        token: contextvars.Token[tuple[_Shared, str] | None] | None = None
        try:
            tool = self._executing_tool(ctx, call, args)
            if tool is not None:
                tool.running = True
                token = _CURRENT_TOOL.set((self._shared, tool.execution.id))
        except Exception:
            self._failed("wrap_tool_execute")
        try:
            result = await handler(args)
        except BaseException as exc:
            try:
                if tool is not None:
                    self._end_tool(tool, error=exc)
            except Exception:
                self._failed("wrap_tool_execute")
            raise
        finally:
            if token is not None:
                _CURRENT_TOOL.reset(token)
        try:
            if tool is not None:
                self._end_tool(tool, result=result)
        except Exception:
            self._failed("wrap_tool_execute")
        return result

    def _call_id(self, call: ToolCallPart) -> str:
        return call.tool_call_id or f"{call.tool_name}_call"

    def _start_tool(
        self, ctx: RunContext[Any], call: ToolCallPart, args: RawToolArgs | None
    ) -> _ToolCall | None:
        state = self._active
        if state is None:
            return None
        call_id = self._call_id(call)
        previous = state.tools.get(call_id)
        if previous is not None and not previous.ended:
            return previous
        # Approved deferred calls run before the first request step: under the agent.
        parent = state.turn if state.turn is not None else state.agent
        execution = Execution(
            call_id, "tool", attempt=self._shared.next_tool_attempt(call_id), parent_id=parent.id
        )
        if previous is not None and previous.step == ctx.run_step and previous.error is not None:
            # The same call is run again within its step: a capability retried it.
            self._record(
                ev.retry_scheduled(
                    previous.execution, next_attempt=execution.attempt, error=previous.error
                )
            )
        tool = _ToolCall(execution, call.tool_name, ctx.run_step, ctx.retry, ctx.max_retries)
        state.tools[call_id] = tool
        state.turn_tool_calls += 1
        self._record(
            _with(
                ev.tool_exec_start(execution, call.tool_name, _lower_args(args)),
                retry=ctx.retry or None,
                max_retries=ctx.max_retries or None,
            )
        )
        return tool

    def _executing_tool(
        self, ctx: RunContext[Any], call: ToolCallPart, args: ValidatedToolArgs
    ) -> _ToolCall | None:
        state = self._active
        if state is None:
            return None
        tool = state.tools.get(self._call_id(call))
        if tool is not None and not tool.ended:
            return tool
        # Validation was skipped (an approved deferred call) or the call is run again.
        return self._start_tool(ctx, call, call.args)

    def _end_tool(
        self,
        tool: _ToolCall,
        *,
        result: Any = None,
        error: BaseException | None = None,
        disposition: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        if tool.ended:
            return
        tool.ended = True
        name = tool.name
        if error is None:
            self._record(
                ev.tool_exec_end(
                    tool.execution,
                    name,
                    None if disposition else _lower(result),
                    details=details,
                    disposition=disposition,
                )
            )
            return
        content: Any = None
        if isinstance(error, CallDeferred | ApprovalRequired):
            # Control flow, not a failure: the call waits for a result from outside the run.
            self._record(
                ev.tool_exec_end(
                    tool.execution,
                    name,
                    disposition="deferred",
                    details={"reason": type(error).__name__, "metadata": _lower(error.metadata)},
                )
            )
            return
        if isinstance(error, ToolRetryError):
            part = error.tool_retry
            content = _lower(part.content)
            retry = part.retry
            details = {"outcome": "retried"}
            if retry is not None:
                details["retry"] = {
                    "cause": retry.cause,
                    "attempt": retry.attempt,
                    "max_retries": retry.max_retries,
                }
            disposition = "retry"
        elif isinstance(error, ModelRetry | ValidationError):
            # Raised inside validation; pydantic-ai turns it into retry feedback after this hook.
            content = error.message if isinstance(error, ModelRetry) else str(error)
            cause = "model_retry" if isinstance(error, ModelRetry) else "validation_error"
            details = {"outcome": "retried", "retry": _pending_retry(tool, cause)}
            disposition = "retry"
        elif isinstance(error, ToolFailedError):
            failed: ToolReturnPart = error.tool_failed
            content = _lower(failed.content)
            details = {"outcome": "failed"}
            disposition = "failed"
        elif isinstance(error, ToolFailed):
            # Raised inside validation; pydantic-ai reports it to the model after this hook.
            content = error.message
            details = {"outcome": "failed"}
            disposition = "failed"
        elif isinstance(error, asyncio.CancelledError):
            disposition = "cancelled"
        else:
            disposition = "raised"
        tool.error = _error_of(error)
        self._record(
            ev.tool_exec_end(
                tool.execution,
                name,
                content,
                details=details,
                error=tool.error,
                disposition=disposition,
            )
        )


def _deferred(result: AgentRunResult[Any] | None) -> dict[str, str]:
    """The tool calls a run ended waiting for, by ID: ``approval`` or ``external``."""
    output = None if result is None else result.output
    if not isinstance(output, DeferredToolRequests):
        return {}
    waiting = {call.tool_call_id: "external" for call in output.calls}
    waiting.update((call.tool_call_id, "approval") for call in output.approvals)
    return waiting


def _pending_retry(tool: _ToolCall, cause: str) -> dict[str, Any]:
    """The retry pydantic-ai charges for a refused call once this hook returns, as it records it.

    Past the tool's budget the run ends instead, and only the cause is known.
    """
    attempt = tool.retry + 1
    if attempt > tool.max_retries:
        return {"cause": cause, "attempt": None, "max_retries": None}
    return {"cause": cause, "attempt": attempt, "max_retries": tool.max_retries}


class _NotFinished(Exception):
    """Why an attempt that never returned was ended: the run or step moved on without it."""


def _provider_state(response: ModelResponse) -> dict[str, Any] | None:
    """What the provider said about the response beyond the message (ids, details)."""
    state = {
        "provider_name": response.provider_name,
        "provider_response_id": response.provider_response_id,
        "provider_details": _lower(response.provider_details)
        if response.provider_details
        else None,
    }
    return {k: v for k, v in state.items() if v is not None} or None

"""The pydantic-ai capability: its hooks mapped to records (state in ``_state``, the model
boundary in ``_recording_model``, values in ``_values``, messages in ``_messages``)."""

from __future__ import annotations

import asyncio
import contextvars
import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_ai import RunContext
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
    ModelResponse,
    ModelResponseStreamEvent,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import (
    Model,
    ModelRequestContext,
    ModelRequestParameters,
)
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from ... import events as ev
from ..._model import Event, Execution
from ..._session import Run
from ._messages import from_pydantic_ai, provider_name, usage_of
from ._recording_model import (
    _delta_of,
    _RecordingModel,
)
from ._state import (
    _CURRENT_TOOL,
    _AgentRun,
    _ModelAttempt,
    _Shared,
    _ToolCall,
)
from ._values import (
    _config,
    _deferred,
    _error_of,
    _lower,
    _lower_args,
    _NotFinished,
    _pending_retry,
    _provider_state,
    _request_messages,
    _response_message,
    _tools,
    _with,
)

__all__ = ["LoopscribeCapability"]


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

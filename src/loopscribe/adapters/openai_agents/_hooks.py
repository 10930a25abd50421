"""The Agents SDK ``RunHooks`` that record a run, with their run helpers and retry policy.

The SDK's hook methods (``on_agent_start`` ... ``on_agent_end``), the helpers
that run and stream with them (:meth:`LoopscribeHooks.run`,
:meth:`LoopscribeHooks.stream_events`, ``record_result``, ``record_error``)
and the retry policy that reports each retried attempt. What is open and how
it is closed is :class:`._executions.RunRecorder`; what values become is
``_values``; messages are ``_messages``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from agents import (
    Agent,
    AgentHookContext,
    AgentsException,
    ModelResponse,
    ModelRetrySettings,
    ModelSettings,
    OutputGuardrailTripwireTriggered,
    RetryDecision,
    RetryPolicyContext,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    RunState,
    Tool,
    ToolErrorFormatterArgs,
    TResponseInputItem,
)
from agents.result import RunResultBase, RunResultStreaming
from agents.stream_events import StreamEvent
from agents.tool_context import ToolContext

from ... import events as ev
from ..._messages import SystemMessage
from ..._model import Event, Execution
from ._executions import RunRecorder, _OpenTool
from ._install import AGENT_TOOL_CALLS
from ._messages import assistant_message, from_items, stop_reason_of, usage_of
from ._values import (
    GUARDRAIL,
    HANDOFF,
    _arguments,
    _declared_tools,
    _handoff_tool_name,
    _jsonable,
    _new_user_input,
    _run_state,
    _tool_name,
    _tool_result,
    _tripped,
    provider_of,
)

__all__ = ["GUARDRAIL", "HANDOFF", "LoopscribeHooks", "provider_of"]


class LoopscribeHooks(RunRecorder):
    """``RunHooks`` that record an OpenAI Agents SDK run into a loopscribe ``Run``.

    Records, as they happen: each agent activation (``agent_start`` /
    ``agent_end``), each turn (``turn_start`` / ``turn_end``), each model call
    (``model_exec_start``, ``model_request`` with the system prompt, input
    items, declared tools and model settings, ``model_exec_end`` with the
    output items and usage), each local tool call (``tool_exec_start`` /
    ``tool_exec_end`` with ``is_error``), committed items (``message_end``:
    the user input, every model output item, every tool result) and
    handoffs (``handoff`` events).

    Use one instance per concurrent ``Runner.run``; sequential runs may
    share one. Instances recording into the same loopscribe ``Run`` share its
    id counters, so their execution ids never collide.

    Attributes:
        errors: How many recording steps failed (each was logged, none raised).
    """

    # -- installing --------------------------------------------------------

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """A copy of ``base`` that lets these hooks see what hooks alone cannot.

        The copy's ``tool_error_formatter`` records the exception a function
        tool raised (its type becomes the span's ``error.type``) and then
        defers to ``base``'s formatter, if any. Its model settings carry a
        retry policy that asks the one the run would have used (``base``'s,
        else the current agent's), returns its answer unchanged, and tells
        the hooks which failed model attempts are retried. ``base`` also tells
        the hooks which model and model settings the run overrides.

        Args:
            base: The run's configuration; ``None`` means ``RunConfig()``.

        Returns:
            The configuration to pass to ``Runner.run``.
        """
        config = base if base is not None else RunConfig()
        chained = config.tool_error_formatter

        async def format_tool_error(args: ToolErrorFormatterArgs[Any]) -> str | None:
            try:
                if args.kind == "tool_exception" and args.error is not None:
                    self._tool_errors[args.call_id] = args.error
            except Exception:
                self._failed("a tool error")
            if chained is None:
                return None
            message = chained(args)
            return await message if inspect.isawaitable(message) else message

        self._run_config = dataclasses.replace(
            config,
            tool_error_formatter=format_tool_error,
            model_settings=self._watch_retries(config.model_settings),
        )
        return self._run_config

    def _resume(self, input: Any) -> None:
        """Note whether a run continues an interrupted one, and the calls it left pending."""
        self._resuming = isinstance(input, RunState)
        self._resumed_calls = []
        if isinstance(input, RunState):
            self._resumed_calls = [_jsonable(item.raw_item) for item in input.get_interruptions()]

    def _continue_agent(self, context: RunContextWrapper[Any], agent: Agent[Any]) -> None:
        """Open the agent execution of a resumed run, with the decisions on its pending calls.

        Each call the host approved or rejected since the interruption gets an
        ``approval`` record (under the call's own execution), then its pending
        calls are the last output: a rejected call never reaches
        ``on_tool_start``; like a call a guardrail refused, it becomes a tool
        execution when the next request shows what the model was told instead
        (see :meth:`_calls_not_run`).
        """
        self._reset()
        ex = self._start_agent(agent, resumed=True)
        self._last_output = self._resumed_calls
        self._resuming = False
        for call in self._resumed_calls:
            if not (isinstance(call, Mapping) and isinstance(call.get("call_id"), str)):
                continue
            call_id, name = call["call_id"], str(call.get("name"))
            approved = context.is_tool_approved(name, call_id)
            if approved is None:
                continue
            tool = self._decided[call_id] = self._ids.call(call_id, "tool", ex.id)
            args = _arguments(str(call.get("arguments") or ""))
            self._record(ev.approval(tool, name, approved=approved, args=args))

    def _watch_retries(self, settings: ModelSettings | None) -> ModelSettings:
        """Run-level model settings whose retry policy also tells these hooks what it decided.

        The SDK retries a failed model call inside one ``on_llm_start`` /
        ``on_llm_end`` pair; only its retry policy sees each failure. The
        policy installed here asks the one the run would have used (the
        host's run-level policy, else the current agent's) and notes a retry
        it grants, so the failed attempt is recorded with its error. Without
        a retry configuration anywhere the SDK never calls it: nothing changes.
        """
        base = settings if settings is not None else ModelSettings()
        host = base.retry
        chained = host.policy if host is not None else None
        if isinstance(chained, _WatchedPolicy):
            # An agent used as a tool inherits the outer run's config: watch the host's
            # policy (or this run's agents') for this run, not through the outer hooks.
            chained = chained._chained
        retry = ModelRetrySettings(
            max_retries=host.max_retries if host is not None else None,
            backoff=host.backoff if host is not None else None,
            policy=_WatchedPolicy(self, chained),
        )
        return dataclasses.replace(base, retry=retry)

    def _agent_retry_policy(self) -> Any:
        agent = self._agents[-1][0] if self._agents else self._starting_agent
        retry = agent.model_settings.retry if agent is not None else None
        return retry.policy if retry is not None else None

    def _retry_decided(self, context: RetryPolicyContext, decision: Any) -> None:
        """Note a failed attempt the SDK will retry (its own vetoes applied, as it applies them)."""
        granted = decision.retry if isinstance(decision, RetryDecision) else bool(decision)
        if not granted or self._model is None:
            return
        approves = bool(getattr(decision, "_approves_replay", False))
        unsafe_ok = bool(getattr(decision, "approve_unsafe_replay", False))
        safety = getattr(context, "replay_safety", None)
        if getattr(context, "stateful_request", False) and not (
            approves or safety == "safe" or (unsafe_ok and safety == "unsafe")
        ):
            return  # the SDK refuses to replay a stateful request: the run fails instead
        if safety == "unsafe" and not (approves or unsafe_ok):
            return
        delay = decision.delay if isinstance(decision, RetryDecision) else None
        self._retries.append((context.error, delay, datetime.now(UTC)))

    async def run(
        self,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        *,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run`` with these hooks, recording the result or the failure.

        Args:
            starting_agent: As for ``Runner.run``.
            input: As for ``Runner.run``; a ``RunState`` resumes an
                interrupted run (for example one rebuilt from a checkpoint's
                ``run_state``): the calls approved since run first, under
                an agent execution marked ``resumed``.
            run_config: As for ``Runner.run``; see :meth:`run_config`.
            **kwargs: Passed to ``Runner.run`` (``context``, ``max_turns``, ...).

        Returns:
            The SDK's ``RunResult``.

        Raises:
            Exception: Whatever ``Runner.run`` raised, after it was recorded.
        """
        self._reset()
        self._starting_agent = starting_agent
        self._stream = False
        self._resume(input)
        try:
            result = await Runner.run(
                starting_agent, input, hooks=self, run_config=self.run_config(run_config), **kwargs
            )
        except BaseException as exc:
            self.record_error(exc)
            raise
        self.record_result(result)
        return result

    def run_streamed(
        self,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        *,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResultStreaming:
        """``Runner.run_streamed`` with these hooks; model calls are recorded as streamed.

        Consume ``result.stream_events()``, then call :meth:`record_result`
        (or :meth:`record_error` if consuming raised).

        Args:
            starting_agent: As for ``Runner.run_streamed``.
            input: As for ``Runner.run_streamed``.
            run_config: As for ``Runner.run_streamed``; see :meth:`run_config`.
            **kwargs: Passed to ``Runner.run_streamed``.

        Returns:
            The SDK's ``RunResultStreaming``.
        """
        self._reset()
        self._starting_agent = starting_agent
        self._stream = True
        self._resume(input)
        return Runner.run_streamed(
            starting_agent, input, hooks=self, run_config=self.run_config(run_config), **kwargs
        )

    async def stream_events(self, result: RunResultStreaming) -> AsyncIterator[StreamEvent]:
        """``result.stream_events()``, publishing the model's deltas to live subscribers.

        Each text, reasoning and tool-argument delta of a streamed model call
        is recorded as a transient ``message_update`` of that call's model
        execution: a ``loopscribe.live.Bus`` attached to the Session delivers
        it, the file never holds it. Guardrails are recorded as soon as the
        streamed result lists them. When the stream ends the run is recorded
        (:meth:`record_result`, or :meth:`record_error` if it raised)::

            result = hooks.run_streamed(agent, "Hi")
            async for event in hooks.stream_events(result):
                ...

        Args:
            result: What :meth:`run_streamed` (or ``Runner.run_streamed`` with
                these hooks) returned.

        Yields:
            The SDK's stream events, unchanged.
        """
        try:
            async for event in result.stream_events():
                if event.type == "raw_response_event":
                    self._publish(event.data)
                else:
                    self._streamed_guardrails(result)
                yield event
        except BaseException as exc:
            self.record_error(exc)
            raise
        self.record_result(result)

    def _streamed_guardrails(self, result: RunResultStreaming) -> None:
        """Record the guardrails a streamed run has finished so far, close to when they did."""
        try:
            if self._agents:
                self._guardrails(
                    result.input_guardrail_results,
                    result.output_guardrail_results,
                    result.tool_input_guardrail_results,
                    result.tool_output_guardrail_results,
                )
        except Exception:
            self._failed("a streamed guardrail result")

    def _publish(self, raw: Any) -> None:
        """One raw Responses stream event: the start of a model call's stream, or a delta."""
        try:
            kind = getattr(raw, "type", None)
            if kind == "response.created":
                # Streams reach the consumer in the order the calls started.
                self._delta_target = self._streamed.popleft() if self._streamed else None
                return
            target = self._delta_target
            if target is None or not isinstance(kind, str) or not kind.endswith(".delta"):
                return
            delta: Any = getattr(raw, "delta", None)
            if not isinstance(delta, str):
                return
            if kind == "response.output_text.delta":
                update: Any = delta
            elif kind.startswith("response.reasoning"):
                update = {"type": "thinking", "text": delta}
            elif kind == "response.function_call_arguments.delta":
                update = {"type": "tool_call", "item_id": getattr(raw, "item_id", None)}
                update["arguments"] = delta
            else:
                return
            self._record(ev.message_update(target, None, delta=update))
        except Exception:
            self._failed("a stream delta")

    def nested(self, tool: Execution, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``Runner`` arguments for an agent run as ``tool``: hooks nested under it."""
        hooks = LoopscribeHooks(self._run, parent=tool)
        hooks._stream = self._stream
        config = kwargs.get("run_config")
        return {**kwargs, "hooks": hooks, "run_config": hooks.run_config(config)}

    # -- after the run -----------------------------------------------------

    def record_result(self, result: RunResultBase) -> None:
        """Record what a finished run reports but no hook does: its guardrail results.

        Also ends what the run left open, for example a run interrupted for
        a tool approval (``stop_reason="interrupted"``).
        """
        try:
            self._guardrails(
                result.input_guardrail_results,
                result.output_guardrail_results,
                result.tool_input_guardrail_results,
                result.tool_output_guardrail_results,
            )
            interrupted = bool(getattr(result, "interruptions", None))
            self._finish("interrupted" if interrupted else "incomplete")
        except Exception:
            self._failed("a run result")
            return
        if self._checkpoints and self._parent is None:
            self._checkpoint(result, interrupted)

    def _checkpoint(self, result: RunResultBase, interrupted: bool) -> None:
        """Where the conversation stands after a run: what a host resumes from."""
        if self._closed:
            return
        try:
            items = result.to_input_list()
            snapshot: dict[str, Any] = {
                "framework": "openai-agents",
                "agent": result.last_agent.name,
                "input_items": len(items),
            }
            if result.last_response_id is not None:
                snapshot["last_response_id"] = result.last_response_id
            if interrupted:
                snapshot["interrupted"] = True
                # The SDK's own serialized state: what Runner.run resumes from after the
                # approvals (it holds the pending calls, which its input list cannot).
                snapshot["run_state"] = _run_state(result)
            else:
                # A finished run resumes as a new Runner.run of its input list plus the
                # next message (running its RunState again would just call the model again).
                snapshot["input"] = [_jsonable(item) for item in items]
            self._run.save_checkpoint(snapshot)
        except Exception:
            self._failed("a checkpoint")

    def record_error(self, error: BaseException) -> None:
        """Record a failed run: its guardrail results, tripwire, and ``error`` on what was open.

        Every open tool, model call, turn and agent ends with ``error``; the
        top-level ``agent_end`` carrying it marks the run span ERROR.
        """
        try:
            data = getattr(error, "run_data", None) if isinstance(error, AgentsException) else None
            results: dict[str, list[Any]] = {
                "input": list(data.input_guardrail_results) if data is not None else [],
                "output": list(data.output_guardrail_results) if data is not None else [],
                "tool_input": list(data.tool_input_guardrail_results) if data is not None else [],
                "tool_output": list(data.tool_output_guardrail_results) if data is not None else [],
            }
            tripped = _tripped(error)
            if tripped is not None:
                kind, result = tripped
                if not any(r is result for r in results[kind]):
                    results[kind].append(result)
            if self._agent is None:
                # Nothing is open: the run failed before its agent started (a blocking
                # input guardrail, a setup error) or after it ended (an output guardrail).
                # Record the failure on an agent execution of its own, so it is visible.
                if not isinstance(error, OutputGuardrailTripwireTriggered):
                    self._agents = []
                agent = data.last_agent if data is not None else self._starting_agent
                if agent is not None:
                    self._start_agent(agent)
            self._guardrails(
                results["input"], results["output"], results["tool_input"], results["tool_output"]
            )
            reason = "guardrail_tripwire" if tripped is not None else "error"
            self._finish(reason, error)
        except Exception:
            self._failed("a run error")

    # -- hooks -------------------------------------------------------------

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        """An agent became the current agent: a new run, a resumed one, or a handoff's target."""
        try:
            resumed, self._resumed_agent = self._resumed_agent, None
            if resumed is agent and self._agent is not None:
                return  # the resumed run's approved calls ran under this agent already
            if self._resuming and not self._handoff_pending:
                # Its input was committed by the run it continues.
                self._continue_agent(context, agent)
                return
            fresh = not self._handoff_pending
            if fresh:
                self._reset()
            self._handoff_pending = False
            ex = self._start_agent(agent)
            if fresh:
                for message in from_items(_new_user_input(context.turn_input)):
                    self._record(ev.message_end(ex, message))
        except Exception:
            self._failed("on_agent_start")

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """A model call is about to start: it opens a new turn."""
        try:
            if self._model is not None:
                # The SDK started another call without reporting a response for this one.
                self._record(ev.model_exec_end(self._model, error={"message": "no response"}))
            self._calls_not_run(input_items)
            self._end_turn("continue" if self._turn_tools == 0 else "tool_calls")
            n = self._ids.number("turn")
            self._turn_number += 1
            self._agent_turns += 1
            self._turn_tools = 0
            parent = self._agent.id if self._agent is not None else None
            turn = self._turn = Execution(f"turn_{n}", "turn", parent_id=parent)
            model = self._model = Execution(f"model_{n}", "model", parent_id=turn.id)
            name = self._model_name(agent)
            messages: list[Any] = [SystemMessage(system_prompt)] if system_prompt else []
            messages.extend(from_items(_jsonable(item) for item in input_items))
            # Whether the call streams is the runner's business; stream_events pairs
            # each stream with its call (a run's calls, forgotten with the run).
            self._streamed.append(model)
            self._record(ev.turn_start(turn, self._turn_number))
            self._retries = []
            self._model_starts = (
                ev.model_exec_start(
                    model, name, provider=self._provider(agent), stream=self._stream
                ),
                ev.model_request(
                    model,
                    messages,
                    _declared_tools(agent),
                    self._model_settings(agent),
                    model=name,
                    codec=self._run.session.codec,
                ),
            )
            for event in self._model_starts:
                self._record(event)
        except Exception:
            self._failed("on_llm_start")

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """The model call returned: its output items are committed to the conversation."""
        try:
            model, self._model = self._model, None
            if model is None:
                return
            model = self._record_retries(model)
            output = [_jsonable(item) for item in response.output]
            self._last_output = output
            self._ran = set()
            usage = usage_of(response.usage)
            stop_reason = stop_reason_of(output)
            message = assistant_message(
                output,
                usage=usage,
                response_id=response.response_id,
                provider=self._provider(agent),
                stop_reason=stop_reason,
            )
            end = ev.model_exec_end(
                model,
                message=message,
                usage=usage,
                stop_reason=stop_reason,
                response_id=response.response_id,
            )
            extra: dict[str, Any] = {}
            if response.request_id:
                extra["request_id"] = response.request_id
            requests = getattr(response.usage, "requests", 1)
            if isinstance(requests, int) and requests > 1:
                # The SDK's retry policy counts each failed attempt as a request
                # (apply_retry_attempt_usage); hooks see only the attempt that answered.
                extra["failed_attempts"] = requests - 1
            if extra:
                end = Event(end.type, end.execution, {**end.data, **extra})
            self._record(end)
            for committed in message if isinstance(message, list) else [message]:
                self._record(ev.message_end(model, committed))
        except Exception:
            self._failed("on_llm_end")

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """A local tool is about to run."""
        try:
            if self._agent is None and not self._handoff_pending:
                # A resumed run (a RunState) runs the calls approved since it was
                # interrupted before the SDK reports its agent's start.
                self._continue_agent(context, agent)
                self._resumed_agent = agent
            name = _tool_name(tool)
            call_id: str | None = None
            args: Any = None
            if isinstance(context, ToolContext):
                call_id, args = context.tool_call_id, _arguments(context.tool_arguments)
            ex = self._decided.pop(call_id, None) if call_id else None
            if ex is None:
                ex = self._tool_execution(call_id)
            open_tool = _OpenTool(ex, name, call_id)
            if call_id:
                self._tools[call_id] = open_tool
                self._ran.add(call_id)
            else:
                self._anonymous_tools.setdefault(id(tool), []).append(open_tool)
            self._turn_tools += 1
            description = getattr(tool, "description", None)
            self._record(
                ev.tool_exec_start(
                    ex,
                    name,
                    args,
                    tool_type="function",
                    description=description if isinstance(description, str) else None,
                )
            )
            if getattr(tool, "_is_agent_tool", False) and isinstance(context, ToolContext):
                # agent.as_tool(): the SDK runs the agent through Runner, outside these
                # hooks; the runner installed by watch() hands it nested hooks.
                AGENT_TOOL_CALLS[id(context.tool_call)] = (self, ex)
        except Exception:
            self._failed("on_tool_start")

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        """A local tool finished; a failure the SDK turned into output is an error."""
        try:
            call_id = context.tool_call_id if isinstance(context, ToolContext) else None
            if call_id:
                open_tool = self._tools.pop(call_id, None)
            else:
                waiting = self._anonymous_tools.get(id(tool))
                open_tool = waiting.pop(0) if waiting else None
            if open_tool is None:
                # Started before these hooks were installed: record the end alone.
                ex = self._tool_execution(call_id)
                open_tool = _OpenTool(ex, _tool_name(tool), call_id)
            if isinstance(context, ToolContext):
                AGENT_TOOL_CALLS.pop(id(context.tool_call), None)
            body = _jsonable(result)
            error = self._tool_error(call_id, result)
            self._record(
                ev.tool_exec_end(
                    open_tool.execution,
                    open_tool.name,
                    body,
                    is_error=error is not None,
                    error=error,
                )
            )
            if call_id:
                message = _tool_result(call_id, open_tool.name, body, error is not None)
                self._record(ev.message_end(open_tool.execution, message))
        except Exception:
            self._failed("on_tool_end")

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        """The current agent handed off: its turn and activation end here."""
        try:
            data: dict[str, Any] = {"from_agent": from_agent.name, "to_agent": to_agent.name}
            tool = _handoff_tool_name(from_agent, to_agent)
            call_id: str | None = None
            if tool is not None:
                data["tool"] = tool
                for item in self._last_output:
                    if isinstance(item, Mapping) and item.get("name") == tool:
                        call_id = item.get("call_id")
                        data["tool_call_id"] = call_id
                        break
            if self._agent is not None:
                self._record(Event(HANDOFF, self._agent, data))
            if tool is not None and isinstance(call_id, str):
                self._handoff_call(from_agent, to_agent, tool, call_id)
            self._end_turn("handoff")
            self._end_agent("handoff")
            self._handoff_pending = True
        except Exception:
            self._failed("on_handoff")

    async def on_agent_end(
        self, context: AgentHookContext[Any], agent: Agent[Any], output: Any
    ) -> None:
        """The agent produced the run's final output."""
        try:
            self._end_turn("final_output")
            self._end_agent("final_output")
        except Exception:
            self._failed("on_agent_end")


class _WatchedPolicy:
    """The retry policy a run would use, telling :class:`LoopscribeHooks` what it decided.

    It asks the host's run-level policy, else the current agent's, and
    returns that answer unchanged. The SDK reads capability markers from the
    policy object (``_openai_agents_*``: which failures it retries); they are
    read from the policy it stands for, so the SDK's own choices stay the same.
    """

    def __init__(self, hooks: LoopscribeHooks, chained: Any) -> None:
        self._hooks = hooks
        self._chained = chained

    def _underlying(self) -> Any:
        return self._chained if self._chained is not None else self._hooks._agent_retry_policy()

    async def __call__(self, context: RetryPolicyContext) -> Any:
        underlying = self._underlying()
        decision: Any = underlying(context) if underlying is not None else False
        if inspect.isawaitable(decision):
            decision = await decision
        try:
            self._hooks._retry_decided(context, decision)
        except Exception:
            self._hooks._failed("a retry decision")
        return decision

    def __copy__(self) -> _WatchedPolicy:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _WatchedPolicy:
        # The SDK copies model settings; like a function, the policy is shared, not copied.
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_openai_agents_"):
            return getattr(self._underlying(), name, False)
        raise AttributeError(name)

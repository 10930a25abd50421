"""The Agents SDK ``RunHooks``: per-run state, no conversion code (see ``_messages``)."""

from __future__ import annotations

import base64
import dataclasses
import inspect
import json
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from agents import (
    Agent,
    AgentHookContext,
    AgentsException,
    Handoff,
    InputGuardrailTripwireTriggered,
    ModelResponse,
    ModelRetrySettings,
    ModelSettings,
    OutputGuardrailTripwireTriggered,
    RetryDecision,
    RetryPolicyContext,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunResult,
    RunState,
    Tool,
    ToolErrorFormatterArgs,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
    TResponseInputItem,
)
from agents.models import get_default_model
from agents.result import RunResultBase, RunResultStreaming
from agents.stream_events import StreamEvent
from agents.tool import FunctionTool, default_tool_error_function
from agents.tool_context import ToolContext
from agents.tracing import get_current_span
from agents.tracing.span_data import FunctionSpanData
from pydantic import BaseModel

from ... import events as ev
from ..._codec import DEFAULT_CODEC
from ..._hostkit import NOT_ENDED, Guard, run_ids
from ..._messages import SystemMessage, TextContent, ToolResultMessage
from ..._model import Event, Execution
from ..._session import Run
from ._install import AGENT_TOOL_CALLS, watch
from ._messages import assistant_message, from_items, stop_reason_of, usage_of

__all__ = ["GUARDRAIL", "HANDOFF", "LoopscribeHooks", "provider_of"]


HANDOFF = "handoff"
"""Event type: the agent handed the conversation to another agent."""
GUARDRAIL = "guardrail"
"""Execution kind: an input, output or tool guardrail ran (``guardrail_end`` says if it tripped)."""

_MAX_DEPTH = 32


def _default_tool_error() -> str | None:
    """What the SDK's default failure_error_function tells the model instead of the exception."""
    try:
        return default_tool_error_function(RunContextWrapper(None), Exception())
    except Exception:  # pragma: no cover - a future SDK changed the function
        return None


_DEFAULT_TOOL_ERROR = _default_tool_error()


def _jsonable(value: Any, depth: int = 0, path: frozenset[int] = frozenset()) -> Any:
    """A JSON-compatible copy of an SDK value, so recording never meets an unknown type."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if depth >= _MAX_DEPTH or id(value) in path:
        return str(value)
    inner = path | {id(value)}
    if isinstance(value, BaseModel):
        dumped = value.model_dump(mode="json", exclude_none=True, warnings=False)
        return _jsonable(dumped, depth + 1, inner)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1, inner) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, depth + 1, inner) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _jsonable(getattr(value, f.name, None), depth + 1, inner)
            for f in dataclasses.fields(value)
        }
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _arguments(raw: str) -> Any:
    """Tool-call arguments as parsed JSON, or the raw text when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw


def _new_user_input(items: Sequence[Any]) -> list[Any]:
    """The user messages that end an input: what this ``Runner.run`` call added.

    History in front of them (a ``Session``, or ``result.to_input_list()``)
    was committed by the run that produced it.
    """
    tail: list[Any] = []
    for item in reversed(items):
        if not (isinstance(item, Mapping) and item.get("role") == "user"):
            break
        tail.append(item)
    return [_jsonable(item) for item in reversed(tail)]


def _run_state(result: RunResultBase) -> Any:
    """The SDK's serialized state of an interrupted run (without the tracing API key)."""
    to_state = getattr(result, "to_state", None)
    if not callable(to_state):
        return None
    return to_state().to_json()


def _tool_result(call_id: str, name: str, body: Any, is_error: bool) -> ToolResultMessage:
    """What a function tool gave back to the model, as the model reads it (text)."""
    if isinstance(body, str):
        text = body
    else:
        try:
            text = orjson.dumps(body, default=str).decode()
        except TypeError:
            # No JSON form (an int beyond 64 bits, deep nesting, a lone surrogate): the
            # codec's own diagnosis, as for any recorded value.
            text = DEFAULT_CODEC.dumps(body).decode()
    return ToolResultMessage(call_id, name, (TextContent(text),), is_error=is_error)


# Model-name prefixes (LiteLLM's and the SDK's MultiProvider's) naming a provider.
_PREFIXES = {
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "azure": "azure.ai.openai",
    "groq": "groq",
    "mistral": "mistral_ai",
    "cohere": "cohere",
    "deepseek": "deepseek",
    "xai": "x_ai",
    "openai": "openai",
}


def provider_of(model: Any) -> str:
    """The well-known provider a model talks to: ``openai`` unless the model says otherwise.

    A LiteLLM or prefixed model name (``litellm/anthropic/claude-...``,
    ``anthropic/claude-...``) names its provider; a model object whose
    client points at another host (``base_url``) is named by that host.
    """
    name = model if isinstance(model, str) else getattr(model, "model", None)
    if isinstance(name, str):
        parts = name.lower().split("/")
        if parts[0] == "litellm":
            parts = parts[1:]
        if len(parts) > 1 and parts[0] in _PREFIXES:
            return _PREFIXES[parts[0]]
    client = getattr(model, "_client", None)
    base_url = str(getattr(client, "base_url", "") or "")
    if base_url and "openai.azure.com" in base_url:
        return "azure.ai.openai"
    return "openai"


def _tool_name(tool: Any) -> str:
    name = getattr(tool, "name", None)
    return name if isinstance(name, str) and name else type(tool).__name__


def _declared_tools(agent: Agent[Any]) -> list[dict[str, Any]]:
    """The tools and handoffs an agent declares; MCP servers' tools are not among them."""
    tools: list[dict[str, Any]] = []
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            tools.append(
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": _jsonable(tool.params_json_schema),
                    "strict": tool.strict_json_schema,
                }
            )
        else:
            tools.append({"type": type(tool).__name__, "name": _tool_name(tool)})
    for target in agent.handoffs:
        if isinstance(target, Handoff):
            tools.append(
                {
                    "type": "handoff",
                    "name": target.tool_name,
                    "description": target.tool_description,
                    "agent": target.agent_name,
                }
            )
        else:
            tools.append(
                {"type": "handoff", "name": Handoff.default_tool_name(target), "agent": target.name}
            )
    return tools


def _handoff_tool_name(from_agent: Agent[Any], to_agent: Agent[Any]) -> str | None:
    for target in from_agent.handoffs:
        if isinstance(target, Handoff) and target.agent_name == to_agent.name:
            return target.tool_name
        if target is to_agent:
            return Handoff.default_tool_name(target)
    return None


def _guardrail_name(guardrail: Any) -> str:
    get_name = getattr(guardrail, "get_name", None)
    name = get_name() if callable(get_name) else getattr(guardrail, "name", None)
    return name if isinstance(name, str) and name else type(guardrail).__name__


_Failure = BaseException | Mapping[str, Any] | None
"""What stopped an execution: the exception, or a recorded error (``NOT_ENDED``)."""


@dataclasses.dataclass
class _OpenTool:
    execution: Execution
    name: str
    call_id: str | None


class LoopscribeHooks(RunHooks[Any]):
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

    def __init__(
        self, run: Run, *, parent: Execution | None = None, checkpoints: bool = False
    ) -> None:
        """Record into ``run``; the host opens and closes the Session and the run.

        Args:
            run: The loopscribe run to record into.
            parent: The execution this run happens inside (the tool call that
                runs an agent as a tool); ``None`` for a top-level run.
            checkpoints: After each top-level run :meth:`record_result`
                records, write a loopscribe ``checkpoint``
                (``Run.save_checkpoint``, which fsyncs) with what a host
                needs to go on: the agent to continue with, the last
                response id, and either ``input`` (``result.to_input_list()``:
                the next ``Runner.run`` takes it plus the next message) or,
                for a run interrupted for tool approvals, ``run_state`` (the
                SDK's ``result.to_state().to_json()``: rebuild it with
                ``RunState.from_json``, approve or reject, and pass it to
                :meth:`run`). Off by default: each checkpoint costs an fsync
                and holds the conversation so far.
        """
        super().__init__()
        self._run = run
        self._parent = parent
        self._checkpoints = checkpoints
        self._stream: bool | None = None
        self._ids = run_ids(run)
        self._run_config: RunConfig | None = None
        self._guard = Guard("OpenAI Agents hooks")
        self._starting_agent: Agent[Any] | None = None
        # The run continues an interrupted one (a RunState was passed): its input is
        # in the file already, and the calls approved since run before its agent starts.
        self._resuming = False
        self._resumed_calls: list[Any] = []
        self._closed = False
        self._reset()
        watch(self)

    def _reset(self) -> None:
        """Forget the state of the previous ``Runner.run`` call."""
        self._agent: Execution | None = None
        self._agent_name = ""
        self._agent_turns = 0
        self._agents: list[tuple[Agent[Any], Execution]] = []
        self._turn: Execution | None = None
        self._turn_number = 0
        self._turn_tools = 0
        self._model: Execution | None = None
        self._last_output: list[Any] = []
        # Call ids of the last response that reached a tool execution (ran, or a handoff).
        self._ran: set[str] = set()
        self._handoff_pending = False
        self._tools: dict[str, _OpenTool] = {}
        self._anonymous_tools: dict[int, list[_OpenTool]] = {}
        self._tool_errors: dict[str, BaseException] = {}
        self._handed_off_by: str | None = None
        # Streamed model calls not yet reached by the consumer of stream_events, in order.
        self._streamed: deque[Execution] = deque()
        self._delta_target: Execution | None = None
        # The records that began the current model call, re-recorded for each retry,
        # and the failed attempts the SDK's retry policy chose to retry, with when.
        self._model_starts: tuple[Event, ...] = ()
        self._retries: list[tuple[Any, float | None, datetime]] = []
        self._guardrails_seen: dict[int, Any] = {}
        # The agent opened for the approved calls of a resumed run, before the SDK's
        # on_agent_start for it (which then continues it instead of starting another).
        self._resumed_agent: Agent[Any] | None = None
        # The executions of calls whose approval decision was recorded, by call id.
        self._decided: dict[str, Execution] = {}

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

    def _record_retries(self, model: Execution) -> Execution:
        """Write the failed attempts of ``model`` noted so far; return the attempt now running.

        Written when the call ends (its attempts are known then), each
        timestamped when it happened: the failed attempt's end and
        ``retry_scheduled``, then the next attempt's start and request.
        """
        retries, self._retries = self._retries, []
        for error, delay_s, failed_at in retries:
            self._record(ev.model_exec_end(model, error=error, timestamp=failed_at))
            nxt = Execution(model.id, model.kind, model.attempt + 1, model.parent_id)
            delay_ms = None if delay_s is None else delay_s * 1000.0
            self._record(
                ev.retry_scheduled(
                    model,
                    next_attempt=nxt.attempt,
                    delay_ms=delay_ms,
                    error=error,
                    timestamp=failed_at,
                )
            )
            started = failed_at + timedelta(seconds=delay_s or 0.0)
            for event in self._model_starts:
                self._record(Event(event.type, nxt, event.data, started))
            model = nxt
        return model

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

    # -- internals -----------------------------------------------------------

    def _handoff_call(
        self, from_agent: Agent[Any], to_agent: Agent[Any], tool: str, call_id: str
    ) -> None:
        """The handoff's function call as a tool execution, with the result the model sees."""
        ex = self._tool_execution(call_id)
        self._turn_tools += 1
        self._record(ev.tool_exec_start(ex, tool, {}, tool_type="function"))
        result = _transfer_message(from_agent, to_agent)
        self._record(ev.tool_exec_end(ex, tool, result, disposition="handoff"))
        self._record(ev.message_end(ex, _tool_result(call_id, tool, result, False)))
        self._handed_off_by = ex.id
        self._ran.add(call_id)

    def _calls_not_run(self, input_items: Sequence[Any]) -> None:
        """Function calls the SDK answered without running the tool: a tool execution each.

        A tool input guardrail that rejects a call (or a tool the SDK could not
        run) never reaches ``on_tool_start``, yet the model is told something
        in the next request: the call gets its execution there, with that
        output, ``disposition="not_executed"``.
        """
        outputs: dict[str, Any] = {}
        for raw in input_items:
            item = _jsonable(raw)
            if isinstance(item, Mapping) and item.get("type") == "function_call_output":
                outputs[str(item.get("call_id"))] = item.get("output")
        for call in self._last_output:
            if not (isinstance(call, Mapping) and call.get("type") == "function_call"):
                continue
            call_id = call.get("call_id")
            if not isinstance(call_id, str) or call_id in self._ran or call_id not in outputs:
                continue
            self._ran.add(call_id)
            name = str(call.get("name"))
            ex = self._decided.pop(call_id, None) or self._tool_execution(call_id)
            self._turn_tools += 1
            args = _arguments(str(call.get("arguments") or ""))
            self._record(ev.tool_exec_start(ex, name, args, tool_type="function"))
            body = outputs[call_id]
            self._record(ev.tool_exec_end(ex, name, body, disposition="not_executed"))
            self._record(ev.message_end(ex, _tool_result(call_id, name, body, False)))

    def _tool_execution(self, call_id: str | None) -> Execution:
        """A tool call's execution under the open turn (or agent): the SDK's call id, the
        next attempt of it if the run used it before; ``tool_N`` for a call without one."""
        parent = self._turn or self._agent
        parent_id = parent.id if parent is not None else None
        if call_id:
            return self._ids.call(call_id, "tool", parent_id)
        return Execution(f"tool_{self._ids.number('tool')}", "tool", parent_id=parent_id)

    def nested(self, tool: Execution, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``Runner`` arguments for an agent run as ``tool``: hooks nested under it."""
        hooks = LoopscribeHooks(self._run, parent=tool)
        hooks._stream = self._stream
        config = kwargs.get("run_config")
        return {**kwargs, "hooks": hooks, "run_config": hooks.run_config(config)}

    def close(self) -> None:
        """Stop recording: end what the current run left open; record nothing more.

        Each open tool call, model call, turn and agent ends with the toolkit's
        ``NotEnded`` error and ``stop_reason`` ``cancelled``, innermost first;
        later hook calls of the run are ignored. ``uninstall()`` calls it on
        every live hooks object. Never raises.
        """
        if self._closed:
            return
        with self._guard.contained("close"):
            self._finish("cancelled", NOT_ENDED)
        self._closed = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    def _record(self, event: Event) -> None:
        if self._closed:
            return
        try:
            self._run.record(event)
        except Exception:
            self._failed(f"a {event.type} event")

    def _failed(self, what: str) -> None:
        """Count and log a failure (the toolkit's never-raise policy)."""
        self._guard.failed(what)

    @property
    def errors(self) -> int:
        """How many recording steps failed (the first was logged at ERROR, none raised)."""
        return self._guard.errors

    def _start_agent(self, agent: Agent[Any], *, resumed: bool = False) -> Execution:
        """An agent execution; the target of a handoff names the handoff's tool call.

        ``resumed``: it continues a run interrupted for approvals (``agent_start``
        says so with ``resumed: true``).
        """
        parent = self._parent.id if self._parent is not None else None
        ex = Execution(f"agent_{self._ids.number('agent')}", "agent", parent_id=parent)
        self._agent, self._agent_name, self._agent_turns = ex, agent.name, 0
        self._agents.append((agent, ex))
        start = ev.agent_start(ex, agent.name)
        handed_off_by, self._handed_off_by = self._handed_off_by, None
        extra: dict[str, Any] = {}
        if handed_off_by is not None:
            extra["handoff_call_id"] = handed_off_by
        if resumed:
            extra["resumed"] = True
        if extra:
            start = Event(start.type, ex, {**start.data, **extra})
        self._record(start)
        return ex

    def _model_name(self, agent: Agent[Any]) -> str:
        config = self._run_config
        model: Any = config.model if config is not None and config.model is not None else None
        if model is None:
            model = agent.model
        if model is None:
            return get_default_model()
        if isinstance(model, str):
            return model
        name = getattr(model, "model", None)
        return name if isinstance(name, str) and name else type(model).__name__

    def _provider(self, agent: Agent[Any]) -> str:
        config = self._run_config
        model: Any = config.model if config is not None and config.model is not None else None
        return provider_of(model if model is not None else agent.model or get_default_model())

    def _model_settings(self, agent: Agent[Any]) -> dict[str, Any]:
        """The agent's model settings with the run's overrides (the SDK's own resolution)."""
        settings = agent.model_settings
        config = self._run_config
        if config is not None and config.model_settings is not None:
            settings = settings.resolve(config.model_settings)
        fields = _jsonable(settings)
        retry = fields.get("retry")
        if isinstance(retry, dict):
            # The policy is code (and, here, the hooks' own wrapper), not a setting.
            retry.pop("policy", None)
            if not any(v is not None for v in retry.values()):
                del fields["retry"]
        return {k: v for k, v in fields.items() if v is not None}

    def _tool_error(self, call_id: str | None, result: object) -> Any:
        """The failure behind a tool's output, if it failed: exception, span error, or default."""
        if call_id is not None:
            exc = self._tool_errors.pop(call_id, None)
            if exc is not None:
                return exc
        span = get_current_span()
        if span is not None and isinstance(span.span_data, FunctionSpanData) and span.error:
            return {
                "message": span.error.get("message", ""),
                "data": _jsonable(span.error.get("data")),
            }
        if _DEFAULT_TOOL_ERROR is not None and result == _DEFAULT_TOOL_ERROR:
            return {"message": "the tool raised; the SDK's default failure_error_function answered"}
        return None

    def _end_turn(self, stop_reason: str, error: _Failure = None) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        self._record(
            ev.turn_end(
                turn,
                self._turn_number,
                stop_reason=stop_reason,
                tool_calls=self._turn_tools,
                error=error,
            )
        )

    def _end_agent(self, stop_reason: str, error: _Failure = None) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            self._record(
                ev.agent_end(
                    agent,
                    self._agent_name,
                    stop_reason=stop_reason,
                    error=error,
                    turns=self._agent_turns,
                )
            )

    def _finish(self, stop_reason: str, error: _Failure = None) -> None:
        """End whatever the run left open, innermost first."""
        for key, (hooks, _) in list(AGENT_TOOL_CALLS.items()):
            if hooks is self:
                # An agent tool that never reported its end: forget it with the run.
                AGENT_TOOL_CALLS.pop(key, None)
        open_tools = [*self._tools.values()]
        open_tools.extend(t for waiting in self._anonymous_tools.values() for t in waiting)
        self._tools.clear()
        self._anonymous_tools.clear()
        for tool in open_tools:
            self._record(
                ev.tool_exec_end(
                    tool.execution,
                    tool.name,
                    is_error=error is not None,
                    error=error,
                    disposition=stop_reason,
                )
            )
        model, self._model = self._model, None
        if model is not None:
            model = self._record_retries(model)
            self._record(ev.model_exec_end(model, error=error, stop_reason=stop_reason))
        self._end_turn(stop_reason, error)
        self._end_agent(stop_reason, error)
        self._handoff_pending = False

    def _guardrails(
        self,
        inputs: Iterable[Any],
        outputs: Iterable[Any],
        tool_inputs: Iterable[Any],
        tool_outputs: Iterable[Any],
    ) -> None:
        first = self._agents[0][1] if self._agents else None
        last = self._agents[-1][1] if self._agents else None
        for result in self._unseen(inputs):
            self._guardrail(first, "input", result.guardrail, result.output)
        for result in self._unseen(outputs):
            owner = next((ex for a, ex in reversed(self._agents) if a is result.agent), last)
            self._guardrail(owner, "output", result.guardrail, result.output)
        for kind, results in (("tool_input", tool_inputs), ("tool_output", tool_outputs)):
            for result in self._unseen(results):
                self._guardrail(last, kind, result.guardrail, result.output)

    def _unseen(self, results: Iterable[Any]) -> list[Any]:
        """The guardrail results not recorded yet (a streamed run reports them as they finish)."""
        fresh = [r for r in results if self._guardrails_seen.get(id(r)) is not r]
        for result in fresh:
            # Kept, not just its id: a live object's id is never reused.
            self._guardrails_seen[id(result)] = result
        return fresh

    def _guardrail(self, owner: Execution | None, kind: str, guardrail: Any, output: Any) -> None:
        """A guardrail that ran, as a ``guardrail`` execution nested under its agent.

        Hooks learn guardrail results only from the run's result (or its
        exception), so both records are written then: they say what the
        guardrail decided, not how long it took.
        """
        parent = owner.id if owner is not None else None
        ex = Execution(f"guardrail_{self._ids.number('guardrail')}", GUARDRAIL, parent_id=parent)
        name = _guardrail_name(guardrail)
        behavior = getattr(output, "behavior", None)
        kind_of_behavior: str | None = None
        if isinstance(behavior, Mapping):
            # A tool guardrail: allow, reject_content or raise_exception.
            kind_of_behavior = behavior.get("type")
            triggered = kind_of_behavior != "allow"
        else:
            triggered = bool(getattr(output, "tripwire_triggered", False))
        self._record(ev.guardrail_start(ex, name, kind=kind))
        self._record(
            ev.guardrail_end(
                ex,
                name,
                triggered=triggered,
                behavior=kind_of_behavior,
                output_info=_jsonable(getattr(output, "output_info", None)),
            )
        )


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


def _tripped(error: BaseException) -> tuple[str, Any] | None:
    """The guardrail result whose tripwire raised ``error``, with its kind."""
    if isinstance(error, InputGuardrailTripwireTriggered):
        return "input", error.guardrail_result
    if isinstance(error, OutputGuardrailTripwireTriggered):
        return "output", error.guardrail_result
    if isinstance(error, ToolInputGuardrailTripwireTriggered):
        return "tool_input", _ToolTrip(error.guardrail, error.output)
    if isinstance(error, ToolOutputGuardrailTripwireTriggered):
        return "tool_output", _ToolTrip(error.guardrail, error.output)
    return None


@dataclasses.dataclass
class _ToolTrip:
    """A tool guardrail's tripwire, shaped like the results the SDK collects."""

    guardrail: Any
    output: Any


def _transfer_message(from_agent: Agent[Any], to_agent: Agent[Any]) -> str:
    """The function-call output the SDK gives the model for a handoff."""
    for target in from_agent.handoffs:
        if isinstance(target, Handoff) and target.agent_name == to_agent.name:
            return target.get_transfer_message(to_agent)
    return json.dumps({"assistant": to_agent.name})

"""Record OpenAI Agents SDK runs (``openai-agents``) into a loopscribe session.

Install with ``pip install 'loopscribe[openai-agents]'``. The simplest use
wraps ``Runner.run``::

    from agents import Agent, Runner
    from loopscribe import Session
    from loopscribe.adapters.openai_agents import LoopscribeHooks

    with Session.create("agent.jsonl") as session, session.begin_run() as run:
        result = await LoopscribeHooks(run).run(agent, "What's the weather in Lisbon?")

which is ``Runner.run(agent, input, hooks=hooks, run_config=hooks.run_config(...))``
followed by :meth:`LoopscribeHooks.record_result` (or, if the run raised,
:meth:`LoopscribeHooks.record_error`). Passing ``hooks=LoopscribeHooks(run)``
to ``Runner.run`` or ``Runner.run_streamed`` alone records everything the
SDK reports through its hooks; the other two steps add guardrail results,
failures and the exception type of failed tools.

How the SDK's calls become executions. Ids are the SDK's tool-call ids or
counters per loopscribe ``Run``, so the same script always gives the same ids:

* an agent activation (``on_agent_start`` until ``on_agent_end`` or
  ``on_handoff``): ``agent_N``, kind ``agent``, no parent;
* a turn, which is one model call and the tool calls it asked for:
  ``turn_N``, kind ``turn``, parent ``agent_N``;
* the model call (``on_llm_start`` / ``on_llm_end``): ``model_N``, kind
  ``model``, parent ``turn_N``;
* a local tool call (``on_tool_start`` / ``on_tool_end``): the SDK's
  ``call_id`` (``tool_N`` for tools that get none), kind ``tool``, parent
  ``turn_N``. A ``call_id`` already used in the same loopscribe run (a
  scripted model that reuses ids) becomes ``call_id/2``, ``call_id/3``…
  so no span is lost.

Handoffs are ``handoff`` events and guardrail results ``guardrail`` events,
both on an agent execution. Nothing here raises into the SDK: failures are
logged on the ``loopscribe`` logger and counted in
:attr:`LoopscribeHooks.errors`.

Tracing: the SDK exports its own traces to OpenAI unless told otherwise. To
keep everything local, call ``agents.set_tracing_disabled(True)`` or pass
``RunConfig(tracing_disabled=True)``; recording does not depend on it. With
SDK tracing on, a tool failure hidden by a custom ``failure_error_function``
is also read from the SDK's function span.

What hooks cannot show, and so is not recorded: model retries inside the
SDK's retry policy (one model execution per turn, attempt 1), the SDK's
implicit model-setting defaults, tools listed at run time by MCP servers,
hosted tools (they run at the provider and appear only as output items),
and a response's model name or finish reason (the ``stop_reason`` is read
from the output items). An output guardrail trips after ``on_agent_end``;
:meth:`LoopscribeHooks.record_error` then records it on an agent execution
of its own, which ends with the error.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import logging
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from agents import (
    Agent,
    AgentHookContext,
    AgentsException,
    Handoff,
    InputGuardrailTripwireTriggered,
    ModelResponse,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Runner,
    RunResult,
    Tool,
    ToolErrorFormatterArgs,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
    TResponseInputItem,
)
from agents.models import get_default_model
from agents.result import RunResultBase
from agents.tool import FunctionTool, default_tool_error_function
from agents.tool_context import ToolContext
from agents.tracing import get_current_span
from agents.tracing.span_data import FunctionSpanData
from pydantic import BaseModel

from loopscribe import Event, Execution, Run
from loopscribe import events as ev

__all__ = ["GUARDRAIL", "HANDOFF", "LoopscribeHooks"]

logger = logging.getLogger(__name__)

HANDOFF = "handoff"
"""Event type: the agent handed the conversation to another agent."""
GUARDRAIL = "guardrail"
"""Event type: an input, output or tool guardrail ran (``triggered`` says if it tripped)."""

# Output items the SDK executes on the client; hosted calls (web search, ...) run at the provider.
_CLIENT_CALLS = frozenset(
    {
        "function_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "custom_tool_call",
    }
)
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


def _stop_reason(output: Iterable[Any]) -> str | None:
    """``tool_calls`` or ``stop``, read from the output items (the SDK reports no finish reason)."""
    types = {item.get("type") for item in output if isinstance(item, Mapping)}
    if types & _CLIENT_CALLS:
        return "tool_calls"
    if "message" in types:
        return "stop"
    return None


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


@dataclasses.dataclass
class _Counters:
    """Execution-id counters shared by every LoopscribeHooks recording into one Run."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    next: dict[str, int] = dataclasses.field(default_factory=dict)
    tool_ids: set[str] = dataclasses.field(default_factory=set)

    def number(self, kind: str) -> int:
        with self.lock:
            n = self.next.get(kind, 0) + 1
            self.next[kind] = n
            return n

    def tool_id(self, call_id: str) -> str:
        """``call_id``, made unique within the run if a model reused it."""
        with self.lock:
            candidate, n = call_id, 1
            while candidate in self.tool_ids:
                n += 1
                candidate = f"{call_id}/{n}"
            self.tool_ids.add(candidate)
            return candidate


_COUNTERS: weakref.WeakKeyDictionary[Run, _Counters] = weakref.WeakKeyDictionary()
_COUNTERS_LOCK = threading.Lock()


def _counters(run: Run) -> _Counters:
    with _COUNTERS_LOCK:
        counters = _COUNTERS.get(run)
        if counters is None:
            counters = _COUNTERS[run] = _Counters()
        return counters


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

    def __init__(self, run: Run) -> None:
        """Record into ``run``; the host opens and closes the Session and the run.

        Args:
            run: The loopscribe run to record into.
        """
        super().__init__()
        self._run = run
        self._ids = _counters(run)
        self._run_config: RunConfig | None = None
        self.errors = 0
        self._starting_agent: Agent[Any] | None = None
        self._reset()

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
        self._handoff_pending = False
        self._tools: dict[str, _OpenTool] = {}
        self._anonymous_tools: dict[int, list[_OpenTool]] = {}
        self._tool_errors: dict[str, BaseException] = {}

    # -- installing --------------------------------------------------------

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """A copy of ``base`` that lets these hooks see what hooks alone cannot.

        The copy's ``tool_error_formatter`` records the exception a function
        tool raised (its type becomes the span's ``error.type``) and then
        defers to ``base``'s formatter, if any. ``base`` also tells the hooks
        which model and model settings the run overrides.

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

        self._run_config = dataclasses.replace(config, tool_error_formatter=format_tool_error)
        return self._run_config

    async def run(
        self,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run`` with these hooks, recording the result or the failure.

        Args:
            starting_agent: As for ``Runner.run``.
            input: As for ``Runner.run``.
            run_config: As for ``Runner.run``; see :meth:`run_config`.
            **kwargs: Passed to ``Runner.run`` (``context``, ``max_turns``, ...).

        Returns:
            The SDK's ``RunResult``.

        Raises:
            Exception: Whatever ``Runner.run`` raised, after it was recorded.
        """
        self._reset()
        self._starting_agent = starting_agent
        try:
            result = await Runner.run(
                starting_agent, input, hooks=self, run_config=self.run_config(run_config), **kwargs
            )
        except BaseException as exc:
            self.record_error(exc)
            raise
        self.record_result(result)
        return result

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
            self._finish("interrupted" if getattr(result, "interruptions", None) else "incomplete")
        except Exception:
            self._failed("a run result")

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
        """An agent became the current agent: a new run or a handoff's target."""
        try:
            fresh = not self._handoff_pending
            if fresh:
                self._reset()
            self._handoff_pending = False
            ex = self._start_agent(agent)
            if fresh:
                for item in _new_user_input(context.turn_input):
                    self._record(ev.message_end(ex, item))
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
            self._end_turn("continue" if self._turn_tools == 0 else "tool_calls")
            n = self._ids.number("turn")
            self._turn_number += 1
            self._agent_turns += 1
            self._turn_tools = 0
            parent = self._agent.id if self._agent is not None else None
            turn = self._turn = Execution(f"turn_{n}", "turn", parent_id=parent)
            model = self._model = Execution(f"model_{n}", "model", parent_id=turn.id)
            name = self._model_name(agent)
            messages: list[Any] = (
                [{"role": "system", "content": system_prompt}] if system_prompt else []
            )
            messages.extend(_jsonable(item) for item in input_items)
            self._record(ev.turn_start(turn, self._turn_number))
            self._record(ev.model_exec_start(model, name))
            self._record(
                ev.model_request(
                    model,
                    messages,
                    _declared_tools(agent),
                    self._model_settings(agent),
                    model=name,
                    codec=self._run.session.codec,
                )
            )
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
            output = [_jsonable(item) for item in response.output]
            self._last_output = output
            message = {"role": "assistant", "output": output}
            if response.response_id:
                message["response_id"] = response.response_id
            if response.request_id:
                message["request_id"] = response.request_id
            self._record(
                ev.model_exec_end(
                    model,
                    message=message,
                    usage=_jsonable(response.usage),
                    stop_reason=_stop_reason(output),
                )
            )
            for item in output:
                self._record(ev.message_end(model, item))
        except Exception:
            self._failed("on_llm_end")

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """A local tool is about to run."""
        try:
            name = _tool_name(tool)
            call_id: str | None = None
            args: Any = None
            if isinstance(context, ToolContext):
                call_id, args = context.tool_call_id, _arguments(context.tool_arguments)
            ex_id = self._ids.tool_id(call_id) if call_id else f"tool_{self._ids.number('tool')}"
            parent = self._turn or self._agent
            ex = Execution(ex_id, "tool", parent_id=parent.id if parent is not None else None)
            open_tool = _OpenTool(ex, name, call_id)
            if call_id:
                self._tools[call_id] = open_tool
            else:
                self._anonymous_tools.setdefault(id(tool), []).append(open_tool)
            self._turn_tools += 1
            self._record(ev.tool_exec_start(ex, name, args))
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
                parent = self._turn or self._agent
                ex_id = (
                    self._ids.tool_id(call_id) if call_id else f"tool_{self._ids.number('tool')}"
                )
                ex = Execution(ex_id, "tool", parent_id=parent.id if parent is not None else None)
                open_tool = _OpenTool(ex, _tool_name(tool), call_id)
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
                output = {"type": "function_call_output", "call_id": call_id, "output": body}
                self._record(ev.message_end(open_tool.execution, output))
        except Exception:
            self._failed("on_tool_end")

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        """The current agent handed off: its turn and activation end here."""
        try:
            data: dict[str, Any] = {"from_agent": from_agent.name, "to_agent": to_agent.name}
            tool = _handoff_tool_name(from_agent, to_agent)
            if tool is not None:
                data["tool"] = tool
                for item in self._last_output:
                    if isinstance(item, Mapping) and item.get("name") == tool:
                        data["tool_call_id"] = item.get("call_id")
                        break
            if self._agent is not None:
                self._record(Event(HANDOFF, self._agent, data))
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

    def _record(self, event: Event) -> None:
        try:
            self._run.record(event)
        except Exception:
            self._failed(f"a {event.type} event")

    def _failed(self, what: str) -> None:
        """Count and log a failure: the first with its traceback, later ones at DEBUG level."""
        self.errors += 1
        if self.errors == 1:
            logger.exception("loopscribe could not record %s of an OpenAI Agents run", what)
        else:
            logger.debug("loopscribe could not record %s", what, exc_info=True)

    def _start_agent(self, agent: Agent[Any]) -> Execution:
        ex = Execution(f"agent_{self._ids.number('agent')}", "agent")
        self._agent, self._agent_name, self._agent_turns = ex, agent.name, 0
        self._agents.append((agent, ex))
        self._record(ev.agent_start(ex, agent.name))
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

    def _model_settings(self, agent: Agent[Any]) -> dict[str, Any]:
        """The agent's model settings with the run's overrides (the SDK's own resolution)."""
        settings = agent.model_settings
        config = self._run_config
        if config is not None and config.model_settings is not None:
            settings = settings.resolve(config.model_settings)
        fields = _jsonable(settings)
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

    def _end_turn(self, stop_reason: str, error: BaseException | None = None) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        end = ev.turn_end(
            turn, self._turn_number, stop_reason=stop_reason, tool_calls=self._turn_tools
        )
        if error is not None:
            # turn_end has no error parameter; the shape is the one events use elsewhere.
            failure = {"type": type(error).__qualname__, "message": str(error)}
            end = Event(end.type, end.execution, {**end.data, "error": failure})
        self._record(end)

    def _end_agent(self, stop_reason: str, error: BaseException | None = None) -> None:
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

    def _finish(self, stop_reason: str, error: BaseException | None = None) -> None:
        """End whatever the run left open, innermost first."""
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
        for result in inputs:
            self._guardrail(first, "input", result.guardrail, result.output)
        for result in outputs:
            owner = next((ex for a, ex in reversed(self._agents) if a is result.agent), last)
            self._guardrail(owner, "output", result.guardrail, result.output)
        for kind, results in (("tool_input", tool_inputs), ("tool_output", tool_outputs)):
            for result in results:
                self._guardrail(last, kind, result.guardrail, result.output)

    def _guardrail(self, owner: Execution | None, kind: str, guardrail: Any, output: Any) -> None:
        data: dict[str, Any] = {"guardrail": _guardrail_name(guardrail), "kind": kind}
        behavior = getattr(output, "behavior", None)
        if isinstance(behavior, Mapping):
            # A tool guardrail: allow, reject_content or raise_exception.
            data["behavior"] = behavior.get("type")
            data["triggered"] = behavior.get("type") != "allow"
        else:
            data["triggered"] = bool(getattr(output, "tripwire_triggered", False))
        data["output_info"] = _jsonable(getattr(output, "output_info", None))
        self._record(Event(GUARDRAIL, owner, data))


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

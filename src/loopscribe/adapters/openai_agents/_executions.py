"""The executions one Agents SDK run opens, and closing them: the hooks' bookkeeping.

:class:`RunRecorder` holds what a ``Runner.run`` has open (agent, turn, model
call, tool calls), writes through the toolkit's never-raise guard, and ends
what is left open when the run fails, is cancelled or recording stops. The
SDK's hook methods, the run helpers and the retry policy live in ``_hooks``.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from agents import (
    Agent,
    RunConfig,
    RunHooks,
)
from agents.models import get_default_model
from agents.tracing import get_current_span
from agents.tracing.span_data import FunctionSpanData

from ... import events as ev
from ..._hostkit import NOT_ENDED, Guard, run_ids
from ..._model import Event, Execution
from ..._session import Run
from ._install import AGENT_TOOL_CALLS, watch
from ._values import (
    _DEFAULT_TOOL_ERROR,
    GUARDRAIL,
    _arguments,
    _guardrail_name,
    _jsonable,
    _tool_result,
    _transfer_message,
    provider_of,
)

__all__ = ["RunRecorder"]

_Failure = BaseException | Mapping[str, Any] | None
"""What stopped an execution: the exception, or a recorded error (``NOT_ENDED``)."""


@dataclasses.dataclass
class _OpenTool:
    execution: Execution
    name: str
    call_id: str | None


class RunRecorder(RunHooks[Any]):
    """The state and bookkeeping of :class:`~._hooks.LoopscribeHooks` (see there)."""

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
        """``Runner`` arguments for an agent run as ``tool`` (``LoopscribeHooks`` says how)."""
        raise NotImplementedError

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

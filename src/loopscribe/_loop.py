"""A minimal reference agent loop that publishes the whole event vocabulary.

It is a reference, not a framework: turns, one model call per turn through
the :class:`ModelExecutor`, tool calls, retries with attempt numbers, a
context-transform hook, and a stop. Record it with::

    loop = AgentLoop(model, tools={"get_weather": get_weather})
    for event in loop.run("Weather in Lisbon?"):
        run.record(event)

Execution IDs: ``agent``; ``turn_N`` under it; ``context_N``, ``model_N``
(attempt 1, 2, ... on retries) and the model's tool-call IDs under the turn.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from . import events as ev
from ._executor import LLMRequest, ModelExecution, ModelExecutor
from ._messages import AssistantMessage, Message, TextContent, ToolResultMessage, UserMessage
from ._model import Event, Execution

Tool = Callable[..., Any]
"""Called with the tool call's arguments as keywords. It returns the result, or
is a generator that yields progress updates and returns the result."""
ContextTransform = Callable[[list[Any]], list[Any]]

_LENGTH_STOPS = frozenset({"length", "max_tokens"})


class AgentLoop:
    """Run a conversation: model, tools, retries, until the model stops calling tools.

    Args:
        model: Anything :class:`ModelExecutor` can call.
        tools: Tool functions by name.
        name: The agent's name (``agent_start``/``agent_end``, the run span's name).
        executor: Its middlewares and router are used for the model calls (its
            ``on_event`` is not: events come out of :meth:`run`).
        tool_declarations: What the model is told about the tools.
        config: Per-call model config.
        transform_context: Called before every model call with the
            conversation; returns the messages to send (trimming, summaries).
        max_turns: Stop after this many turns.
        max_attempts: Attempts per model call before the run fails.
    """

    def __init__(
        self,
        model: Any,
        tools: Mapping[str, Tool] | None = None,
        *,
        name: str = "agent",
        executor: ModelExecutor | None = None,
        tool_declarations: Sequence[Any] = (),
        config: Mapping[str, Any] | None = None,
        transform_context: ContextTransform | None = None,
        max_turns: int = 8,
        max_attempts: int = 3,
    ) -> None:
        self.model = model
        self.tools = dict(tools or {})
        self.name = name
        self.executor = executor or ModelExecutor()
        self.tool_declarations = tuple(tool_declarations)
        self.config = config
        self.transform_context = transform_context
        self.max_turns = max_turns
        self.max_attempts = max_attempts
        self.messages: list[Any] = []
        """The conversation after :meth:`run`: history, input and every committed message."""

    def run(self, prompt: str | Message, history: Sequence[Any] = ()) -> Iterator[Event]:
        """Run until the model answers without tool calls; yield every event.

        Transient events (``message_update``, ``tool_exec_update``) are
        yielded too: a Session simply does not write them.
        """
        agent = Execution("agent", "agent")
        yield ev.agent_start(agent, self.name)
        self.messages = list(history)
        user = UserMessage(prompt) if isinstance(prompt, str) else prompt
        yield from self._commit(None, user)
        for turn in range(1, self.max_turns + 1):
            turn_ex = Execution(f"turn_{turn}", "turn", parent_id=agent.id)
            yield ev.turn_start(turn_ex, turn)
            reply = yield from self._model_call(turn, turn_ex)
            if reply is None:
                yield ev.turn_end(turn_ex, turn, stop_reason="error")
                yield ev.agent_end(agent, self.name, stop_reason="error", error="ModelError")
                return
            calls = reply.tool_calls
            for call in calls:
                yield from self._tool_call(call.id, call.name, dict(call.arguments), turn_ex)
            yield ev.turn_end(turn_ex, turn, stop_reason=reply.stop_reason, tool_calls=len(calls))
            if not calls and reply.stop_reason not in _LENGTH_STOPS:
                yield ev.agent_end(agent, self.name, stop_reason=reply.stop_reason, turns=turn)
                return
        yield ev.agent_end(agent, self.name, stop_reason="max_turns", turns=self.max_turns)

    def _commit(self, execution: Execution | None, message: Any) -> Iterator[Event]:
        self.messages.append(message)
        yield ev.message_start(execution, message)
        yield ev.message_end(execution, message)

    def _context(self, turn: int, turn_ex: Execution) -> Generator[Event, None, list[Any]]:
        if self.transform_context is None:
            return list(self.messages)
        ctx = Execution(f"context_{turn}", "context", parent_id=turn_ex.id)
        yield ev.context_transform_start(ctx, messages=len(self.messages))
        try:
            sent = list(self.transform_context(list(self.messages)))
        except Exception as exc:
            yield ev.context_transform_end(ctx, error=exc)
            raise
        yield ev.context_transform_end(ctx, messages=len(sent))
        return sent

    def _model_call(
        self, turn: int, turn_ex: Execution
    ) -> Generator[Event, None, AssistantMessage | None]:
        """One conversation call with retries; returns the committed reply or ``None``."""
        messages = yield from self._context(turn, turn_ex)
        request = LLMRequest(messages, self.tool_declarations, self.config)
        for attempt in range(1, self.max_attempts + 1):
            model_ex = Execution(f"model_{turn}", "model", attempt, parent_id=turn_ex.id)
            events: list[Event] = []
            base = self.executor
            executor = ModelExecutor(base.middlewares, events.append, base.router)
            result = executor.call(self.model, ModelExecution(model_ex, request))
            started = False
            for event in events:
                if event.type != ev.MODEL_STREAM:
                    yield event
                    continue
                # The conversation call reports progress as message events.
                if not started:
                    started = True
                    yield ev.message_start(model_ex, AssistantMessage())
                yield ev.message_update(model_ex, None, delta=event.data.get("chunk"))
            if result.ok and result.message is not None:
                reply = result.message
                if reply.stop_reason in _LENGTH_STOPS and not reply.tool_calls:
                    decision = {"action": "continue", "reason": reply.stop_reason}
                    yield ev.model_response(model_ex, reply, length_recovery=decision)
                self.messages.append(reply)
                yield ev.message_end(model_ex, reply)
                return reply
            if attempt < self.max_attempts:
                yield ev.retry_scheduled(model_ex, next_attempt=attempt + 1, error=result.error)
        return None

    def _tool_call(
        self, call_id: str, name: str, args: dict[str, Any], turn_ex: Execution
    ) -> Iterator[Event]:
        tool_ex = Execution(call_id, "tool", parent_id=turn_ex.id)
        yield ev.tool_exec_start(tool_ex, name, args)
        tool = self.tools.get(name)
        error: Exception | None = None
        output: Any = None
        if tool is None:
            error = LookupError(f"unknown tool {name!r}")
        else:
            yield ev.tool_invoke_start(tool_ex, name, args)
            try:
                output = tool(**args)
                if inspect.isgenerator(output):
                    output = yield from _progress(tool_ex, output)
            except Exception as exc:
                error = exc
        text = str(output) if error is None else f"{type(error).__name__}: {error}"
        result = ToolResultMessage(call_id, name, (TextContent(text),), is_error=error is not None)
        yield ev.tool_exec_end(tool_ex, name, result, error=error)
        yield from self._commit(tool_ex, result)


def _progress(tool_ex: Execution, steps: Iterator[Any]) -> Generator[Event, None, Any]:
    """Relay a generator tool's progress as ``tool_exec_update``; return its result."""
    while True:
        try:
            update = next(steps)
        except StopIteration as done:
            return done.value
        yield ev.tool_exec_update(tool_ex, update)

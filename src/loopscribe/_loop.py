"""A minimal reference agent loop that publishes the whole event vocabulary.

It is a reference, not a framework: turns, one model call per turn through
the :class:`ModelExecutor`, tool calls, retries with attempt numbers, a
context-transform hook, and a stop. Record it with::

    loop = AgentLoop(model, tools={"get_weather": get_weather})
    for event in loop.run("Weather in Lisbon?"):
        run.record(event)

Execution IDs: ``agent``; ``turn_N`` under it; ``context_N``, ``model_N``
(attempt 1, 2, ... on retries) and the model's tool-call IDs under the turn;
``summary_N`` (and ``summary_N_2``, ...) under ``context_N`` for model calls
made by the context transform.

To save the loop's state at turn boundaries, record through
:func:`checkpoint_turns`; a later process restores it with
``AgentLoop.restore(session.load_checkpoint())``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from . import events as ev
from ._executor import LLMRequest, ModelExecution, ModelExecutor, ModelResult
from ._messages import AssistantMessage, Message, TextContent, ToolResultMessage, UserMessage
from ._model import Event, Execution
from ._session import Run

Tool = Callable[..., Any]
"""Called with the tool call's arguments as keywords. It returns the result, or
is a generator that yields progress updates and returns the result."""


@dataclass(slots=True)
class TransformContext:
    """What a context transform gets besides the conversation.

    Attributes:
        executor: The loop's executor: a model call made through it (a
            summary) is published on the loop's event stream, so a recorded
            run holds its request and result like any other call.
        execution: The ``context_N`` execution: nest calls under it.
        turn: The turn about to call the model.
        model: The loop's model (a transform may use another).
    """

    executor: ModelExecutor
    execution: Execution
    turn: int
    model: Any
    _calls: int = field(default=0, repr=False)

    def call(
        self, messages: Sequence[Any], *, model: Any = None, config: Mapping[str, Any] | None = None
    ) -> ModelResult:
        """One model call (a summary) nested under this context execution.

        Its execution ID is ``summary_N`` for the first call of turn N, then
        ``summary_N_2``, ...; ``model`` defaults to the loop's model.
        """
        self._calls += 1
        suffix = "" if self._calls == 1 else f"_{self._calls}"
        ex = Execution(f"summary_{self.turn}{suffix}", "model", parent_id=self.execution.id)
        request = LLMRequest(list(messages), (), config)
        chosen = self.model if model is None else model
        return self.executor.call(chosen, ModelExecution(ex, request))


ContextTransform = (
    Callable[[list[Any]], list[Any]] | Callable[[list[Any], TransformContext], list[Any]]
)
"""``transform(messages)`` or ``transform(messages, context)``: the messages to send."""


def _takes_context(transform: Callable[..., Any]) -> bool:
    try:
        inspect.signature(transform).bind([], None)
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins): the one-argument form
        return False
    return True


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
            conversation (and, if it takes a second argument, a
            :class:`TransformContext` holding the loop's executor); returns
            the messages to send (trimming, summaries).
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
        transform = self.transform_context
        calls: list[Event] = []
        try:
            if _takes_context(transform):
                # The transform's model calls are published on this stream,
                # stamped when they happened (they are yielded afterwards).
                def collect(event: Event) -> None:
                    if event.timestamp is None:
                        event = replace(event, timestamp=datetime.now(UTC))
                    calls.append(event)

                base = self.executor
                executor = ModelExecutor(base.middlewares, collect, base.router)
                context = TransformContext(executor, ctx, turn, self.model)
                sent = list(transform(list(self.messages), context))  # type: ignore[call-arg]
            else:
                sent = list(transform(list(self.messages)))  # type: ignore[call-arg]
        except Exception as exc:
            yield from calls
            yield ev.context_transform_end(ctx, error=exc)
            raise
        yield from calls
        yield ev.context_transform_end(ctx, messages=len(sent))
        return sent

    def state(self) -> dict[str, Any]:
        """The loop's state at a turn boundary, for ``Run.save_checkpoint``.

        A plain dict the default codec encodes: ``{"agent", "messages"}``.
        """
        return {"agent": self.name, "messages": list(self.messages)}

    def restore(self, state: Mapping[str, Any] | None) -> list[Any]:
        """Install a state saved by :meth:`state` (``None``: start empty).

        Returns the restored conversation, to pass as ``history`` to :meth:`run`.
        Model, tools and configuration are this loop's own: rebind them first.
        """
        if state is None:
            self.messages = []
            return []
        messages = state.get("messages")
        if not isinstance(messages, list):
            raise ValueError(
                "not a loop state saved by AgentLoop.state(): it has no 'messages' list"
            )
        self.messages = list(messages)
        return list(self.messages)

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


def checkpoint_turns(run: Run, loop: AgentLoop, events: Iterable[Event]) -> Iterator[Event]:
    """Record ``events`` into ``run``, checkpointing the loop after every completed turn.

    After each ``turn_end`` (a committed boundary: every message of the turn
    is written) it saves ``loop.state()`` with ``run.save_checkpoint``,
    which also fsyncs. The events are yielded on, for the host's own use::

        for event in checkpoint_turns(run, loop, loop.run("Hi")):
            ...

    Recording errors propagate (they are sticky on the Session).
    """
    for event in events:
        run.record(event)
        if event.type == ev.TURN_END:
            run.save_checkpoint(loop.state())
        yield event

"""A minimal reference agent loop that publishes the whole event vocabulary.

It is a reference, not a framework: turns, one model call per turn through
the :class:`ModelExecutor`, tool calls, retries with attempt numbers, a
context-transform hook, an after-run hook, and a stop. Record it with::

    loop = AgentLoop(model, tools={"get_weather": get_weather})
    for event in loop.run("Weather in Lisbon?", run=run):
        run.record(event)

Every event is stamped by the loop's clock when it happens, including the
facts of model calls, which reach the stream once the call is over.

Execution IDs: ``agent``; ``turn_N`` under it; ``context_N``, ``model_N``
(attempt 1, 2, ... on retries) and the model's tool-call IDs under the turn;
``summary_N`` (and ``summary_N_2``, ...) under ``context_N`` for model calls
made by the context transform; ``<call id>_model`` (and ``_model_2``, ...)
under a tool call for the model calls a tool makes with ``context.call``,
``agent_model`` for those of the after-run hook. A model call made through
any executor while a tool, transform or hook runs nests under that step
when it names no parent of its own.

To save the loop's state at turn boundaries and at its end, record through
:func:`checkpoint_turns`; a later process restores it with
``AgentLoop.restore(session.load_checkpoint())``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from . import events as ev
from ._executor import (
    _SCOPE,
    Clock,
    LLMRequest,
    ModelExecution,
    ModelExecutor,
    ModelResult,
    OnEvent,
    Recorder,
    _Scope,
    utc_now,
)
from ._messages import AssistantMessage, Message, TextContent, ToolResultMessage, UserMessage
from ._model import CallRef, Event, Execution
from ._session import Run

T = TypeVar("T")

Tool = Callable[..., Any]
"""Called with the tool call's arguments as keywords (plus ``context=``, a
:class:`ToolContext`, when it has a keyword-only ``context`` parameter). It
returns the result, or is a generator that yields progress updates and
returns the result."""


class LoopContext:
    """What a step of an :class:`AgentLoop` gets: where it runs, and a way to call models.

    The after-run hook gets this class itself; context transforms get a
    :class:`TransformContext`, tools a :class:`ToolContext`.

    Attributes:
        executor: The loop's executor. A model call made through it, or
            through any other executor while the step runs, nests under
            :attr:`execution`, is published on the loop's event stream and
            reaches the executor's ``on_event``.
        execution: The step's execution: the tool call, ``context_N``, or
            ``agent`` for the after-run hook.
        model: The loop's model (a step may use another).
        session_id: The session the loop's stream is recorded into, when
            :meth:`AgentLoop.run` was given its ``run``; else ``None``.
        run_id: That run's ID, or ``None``.
        staged: The artifacts this step staged, by name.
    """

    __slots__ = (
        "_calls",
        "_loop",
        "execution",
        "executor",
        "model",
        "run_id",
        "session_id",
        "staged",
    )

    def __init__(self, loop: AgentLoop, execution: Execution) -> None:
        """Internal: the loop builds one per step."""
        self._loop = loop
        self._calls = 0
        self.executor = loop.executor
        self.execution = execution
        self.model = loop.model
        self.session_id, self.run_id = loop._recording
        self.staged: dict[str, Any] = {}

    @property
    def ref(self) -> CallRef | None:
        """The step's CallRef (session, run, execution, attempt), when the run is known."""
        if self.session_id is None or self.run_id is None:
            return None
        ex = self.execution
        return CallRef(self.session_id, self.run_id, ex.id, ex.attempt)

    @property
    def messages(self) -> tuple[Any, ...]:
        """The conversation so far (read-only)."""
        return tuple(self._loop.messages)

    def _call_id(self, n: int) -> str:
        return f"{self.execution.id}_model"

    def call(
        self,
        messages: Sequence[Any],
        *,
        model: Any = None,
        tools: Sequence[Any] = (),
        config: Mapping[str, Any] | None = None,
    ) -> ModelResult:
        """One model call nested under this step's execution, through the loop's executor.

        Its execution ID is the step's prefix (see the module docstring) for
        the first call and the prefix with ``_2``, ``_3``, ... after it;
        ``model`` defaults to the loop's model.
        """
        self._calls += 1
        call_id = self._call_id(self._calls)
        if self._calls > 1:
            call_id = f"{call_id}_{self._calls}"
        ex = Execution(call_id, "model", parent_id=self.execution.id)
        request = LLMRequest(list(messages), tuple(tools), config)
        chosen = self.model if model is None else model
        return self.executor.call(chosen, ModelExecution(ex, request))

    def stage_artifact(self, name: str, value: Any) -> None:
        """Stage an artifact: it joins the loop's state and the run's ``agent_end``.

        A context transform's artifacts are also in its ``context_transform_end``.

        Args:
            name: The artifact's name; staging a name again replaces it.
            value: A codec-registered value (register your artifact types
                with the Session's codec) or plain JSON. An instance of an
                unregistered class makes recording ``agent_end`` raise
                :class:`~loopscribe.UnknownTypeError`.

        Raises:
            ValueError: ``name`` is not a non-empty string.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"an artifact name must be a non-empty string, got {name!r}")
        self.staged[name] = value
        self._loop._stage(name, value)


class TransformContext(LoopContext):
    """What a context transform gets besides the conversation.

    Its model calls (summaries) are ``summary_N``, ``summary_N_2``, ... under
    ``context_N``. See :class:`LoopContext` for the rest.

    Attributes:
        turn: The turn about to call the model.
    """

    __slots__ = ("turn",)

    def __init__(self, loop: AgentLoop, execution: Execution, turn: int) -> None:
        """Internal: the loop builds one per transform."""
        super().__init__(loop, execution)
        self.turn = turn

    def _call_id(self, n: int) -> str:
        return f"summary_{self.turn}"


class ToolContext(LoopContext):
    """What a tool with a keyword-only ``context`` parameter gets: its coordinates.

    ``context.execution`` is the tool call's execution (its ID is the model's
    tool-call ID, under ``turn_N``); ``context.ref`` its CallRef when the
    loop knows the run. Model calls the tool makes, through ``context.call``
    or any executor, nest under the tool call. See :class:`LoopContext`.

    Attributes:
        tool: The tool's name.
    """

    __slots__ = ("tool",)

    def __init__(self, loop: AgentLoop, execution: Execution, tool: str) -> None:
        """Internal: the loop builds one per tool call."""
        super().__init__(loop, execution)
        self.tool = tool


ContextTransform = (
    Callable[[list[Any]], list[Any]] | Callable[[list[Any], TransformContext], list[Any]]
)
"""``transform(messages)`` or ``transform(messages, context)``: the messages to send."""
AfterRun = Callable[[LoopContext], object]
"""Called once the loop stops, before ``agent_end``: it may stage artifacts and call models."""


def _takes_context(transform: Callable[..., Any]) -> bool:
    try:
        inspect.signature(transform).bind([], None)
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins): the one-argument form
        return False
    return True


def _takes_tool_context(tool: Callable[..., Any]) -> bool:
    """Whether ``tool`` declares a keyword-only ``context`` parameter."""
    try:
        parameter = inspect.signature(tool).parameters.get("context")
    except (TypeError, ValueError):  # no signature: called with the arguments alone
        return False
    return parameter is not None and parameter.kind is inspect.Parameter.KEYWORD_ONLY


def _advance(steps: Iterator[Any]) -> tuple[bool, Any]:
    """One step of a generator tool: ``(False, update)``, or ``(True, result)`` at its end."""
    try:
        return False, next(steps)
    except StopIteration as done:
        return True, done.value


def _deliver(pending: Iterable[tuple[Event, OnEvent | None]]) -> None:
    """Hand events to their observers only: the stream is ending with an exception."""
    for event, observer in pending:
        if observer is not None:
            observer(event)


_LENGTH_STOPS = frozenset({"length", "max_tokens"})


class AgentLoop:
    """Run a conversation: model, tools, retries, until the model stops calling tools.

    Args:
        model: Anything :class:`ModelExecutor` can call.
        tools: Tool functions by name. A tool with a keyword-only
            ``context`` parameter also gets a :class:`ToolContext`.
        name: The agent's name (``agent_start``/``agent_end``, the run span's name).
        executor: Used for every model call of the loop: its middlewares, its
            router, and its ``on_event``, which receives each model fact of
            those calls once (the loop's stream carries them too: record
            one or the other; recording both into one run writes each once).
        tool_declarations: What the model is told about the tools.
        config: Per-call model config.
        transform_context: Called before every model call with the
            conversation (and, if it takes a second argument, a
            :class:`TransformContext`); returns the messages to send
            (trimming, summaries).
        after_run: Called with a :class:`LoopContext` once the loop stops,
            before ``agent_end``, so what it stages is in ``agent_end`` and
            in the state a terminal listener saves.
        max_turns: Stop after this many turns.
        max_attempts: Attempts per model call before the run fails.
        clock: Stamps every event (default: the executor's clock, else now in UTC).
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
        after_run: AfterRun | None = None,
        max_turns: int = 8,
        max_attempts: int = 3,
        clock: Clock | None = None,
    ) -> None:
        self.model = model
        self.tools = dict(tools or {})
        self.name = name
        self.clock: Clock = clock or (executor.clock if executor is not None else utc_now)
        self.executor = executor or ModelExecutor(clock=self.clock)
        self.tool_declarations = tuple(tool_declarations)
        self.config = config
        self.transform_context = transform_context
        self.after_run = after_run
        self.max_turns = max_turns
        self.max_attempts = max_attempts
        self.messages: list[Any] = []
        """The conversation after :meth:`run`: history, input and every committed message."""
        self.artifacts: dict[str, Any] = {}
        """Every artifact staged so far, by name (kept across runs, saved in :meth:`state`)."""
        self._run_artifacts: dict[str, Any] = {}
        self._recording: tuple[str | None, str | None] = (None, None)

    def run(
        self, prompt: str | Message, history: Sequence[Any] = (), *, run: Run | None = None
    ) -> Iterator[Event]:
        """Run until the model answers without tool calls; yield every event.

        Transient events (``message_update``, ``tool_exec_update``) are
        yielded too: a Session simply does not write them.

        Args:
            prompt: The user's input.
            history: The conversation before it (see :meth:`restore`).
            run: The Run the host records this stream into, if any: tools
                then learn their session and run (``ToolContext.ref``).
                Default: the run of the executor's observer when that is a
                :class:`~loopscribe.Recorder`. The loop never records into it
                itself.
        """
        if run is None and isinstance(self.executor.on_event, Recorder):
            run = self.executor.on_event.run
        self._recording = (run.session.id, run.id) if run is not None else (None, None)
        self._run_artifacts = {}
        agent = Execution("agent", "agent")
        yield ev.agent_start(agent, self.name, timestamp=self.clock())
        self.messages = list(history)
        user = UserMessage(prompt) if isinstance(prompt, str) else prompt
        yield from self._commit(None, user)
        for turn in range(1, self.max_turns + 1):
            turn_ex = Execution(f"turn_{turn}", "turn", parent_id=agent.id)
            yield ev.turn_start(turn_ex, turn, timestamp=self.clock())
            reply = yield from self._model_call(turn, turn_ex)
            if reply is None:
                yield ev.turn_end(turn_ex, turn, stop_reason="error", timestamp=self.clock())
                yield from self._end(agent, stop_reason="error", error="ModelError")
                return
            calls = reply.tool_calls
            for call in calls:
                yield from self._tool_call(call.id, call.name, dict(call.arguments), turn_ex)
            yield ev.turn_end(
                turn_ex,
                turn,
                stop_reason=reply.stop_reason,
                tool_calls=len(calls),
                timestamp=self.clock(),
            )
            if not calls and reply.stop_reason not in _LENGTH_STOPS:
                yield from self._end(agent, stop_reason=reply.stop_reason, turns=turn)
                return
        yield from self._end(agent, stop_reason="max_turns", turns=self.max_turns)

    def _end(
        self,
        agent: Execution,
        *,
        stop_reason: str | None,
        error: Any = None,
        turns: int | None = None,
    ) -> Iterator[Event]:
        """Run the after-run hook, then end the run with its summary and staged artifacts."""
        failure: Exception | None = None
        if self.after_run is not None:
            try:
                yield from self._step(agent, self.after_run, LoopContext(self, agent))
            except Exception as exc:
                failure = exc
                stop_reason, error = "error", exc
        yield ev.agent_end(
            agent,
            self.name,
            stop_reason=stop_reason,
            error=error,
            turns=turns,
            artifacts=self._run_artifacts,
            timestamp=self.clock(),
        )
        if failure is not None:
            raise failure

    def _stage(self, name: str, value: Any) -> None:
        self.artifacts[name] = value
        self._run_artifacts[name] = value

    def _step(
        self,
        parent: Execution,
        fn: Callable[..., T],
        *args: Any,
        conversation: Execution | None = None,
    ) -> Generator[Event, None, T]:
        """Run ``fn`` as a step of this loop; yield the events of the model calls made in it.

        Each event goes to its executor's observer, then onto the stream (see
        ``_Scope``); the conversation call's chunks become ``message_start``
        and ``message_update``. An exception from ``fn`` is raised after
        them; an interruption (``KeyboardInterrupt``, ...) reaches the
        observers only, as the stream ends with it.
        """
        scope = _Scope(parent, self.clock)
        token = _SCOPE.set(scope)
        failure: Exception | None = None
        try:
            result = fn(*args)
        except Exception as exc:
            failure = exc
        except BaseException:
            _deliver(scope.close())
            raise
        finally:
            _SCOPE.reset(token)
        started = False
        for event, observer in scope.close():
            if observer is not None:
                observer(event)
            if (
                conversation is None
                or event.type != ev.MODEL_STREAM
                or event.execution != conversation
            ):
                yield event
                continue
            # The conversation call reports progress as message events.
            if not started:
                started = True
                yield ev.message_start(conversation, AssistantMessage(), timestamp=event.timestamp)
            delta = event.data.get("chunk")
            yield ev.message_update(conversation, None, delta=delta, timestamp=event.timestamp)
        if failure is not None:
            raise failure
        return result

    def _commit(self, execution: Execution | None, message: Any) -> Iterator[Event]:
        self.messages.append(message)
        now = self.clock()
        yield ev.message_start(execution, message, timestamp=now)
        yield ev.message_end(execution, message, timestamp=now)

    def _context(self, turn: int, turn_ex: Execution) -> Generator[Event, None, list[Any]]:
        transform = self.transform_context
        if transform is None:
            return list(self.messages)
        ctx = Execution(f"context_{turn}", "context", parent_id=turn_ex.id)
        yield ev.context_transform_start(ctx, messages=len(self.messages), timestamp=self.clock())
        context = TransformContext(self, ctx, turn) if _takes_context(transform) else None
        args: tuple[Any, ...] = (list(self.messages),)
        if context is not None:
            args = (*args, context)
        staged = None if context is None else context.staged
        try:
            sent = list((yield from self._step(ctx, transform, *args)))
        except Exception as exc:
            yield ev.context_transform_end(ctx, error=exc, artifacts=staged, timestamp=self.clock())
            raise
        yield ev.context_transform_end(
            ctx, messages=len(sent), artifacts=staged, timestamp=self.clock()
        )
        return sent

    def state(self) -> dict[str, Any]:
        """The loop's state at a turn boundary or its end, for ``Run.save_checkpoint``.

        A plain dict the Session's codec encodes: ``{"agent", "messages",
        "artifacts"}`` (the artifacts staged so far, by name).
        """
        return {
            "agent": self.name,
            "messages": list(self.messages),
            "artifacts": dict(self.artifacts),
        }

    def restore(self, state: Mapping[str, Any] | None) -> list[Any]:
        """Install a state saved by :meth:`state` (``None``: start empty).

        Returns the restored conversation, to pass as ``history`` to :meth:`run`;
        the staged artifacts come back in :attr:`artifacts`. Model, tools and
        configuration are this loop's own: rebind them first.
        """
        if state is None:
            self.messages = []
            self.artifacts = {}
            return []
        messages = state.get("messages")
        artifacts = state.get("artifacts", {})
        if not isinstance(messages, list) or not isinstance(artifacts, Mapping):
            raise ValueError(
                "not a loop state saved by AgentLoop.state(): it needs a 'messages' list "
                "(and 'artifacts', if any, by name)"
            )
        self.messages = list(messages)
        self.artifacts = dict(artifacts)
        return list(self.messages)

    def _model_call(
        self, turn: int, turn_ex: Execution
    ) -> Generator[Event, None, AssistantMessage | None]:
        """One conversation call with retries; returns the committed reply or ``None``."""
        messages = yield from self._context(turn, turn_ex)
        request = LLMRequest(messages, self.tool_declarations, self.config)
        for attempt in range(1, self.max_attempts + 1):
            model_ex = Execution(f"model_{turn}", "model", attempt, parent_id=turn_ex.id)
            call = ModelExecution(model_ex, request)
            result = yield from self._step(
                turn_ex, self.executor.call, self.model, call, conversation=model_ex
            )
            if result.ok and result.message is not None:
                reply = result.message
                if reply.stop_reason in _LENGTH_STOPS and not reply.tool_calls:
                    decision = {"action": "continue", "reason": reply.stop_reason}
                    yield ev.model_response(
                        model_ex, reply, length_recovery=decision, timestamp=self.clock()
                    )
                self.messages.append(reply)
                yield ev.message_end(model_ex, reply, timestamp=self.clock())
                return reply
            if attempt < self.max_attempts:
                yield ev.retry_scheduled(
                    model_ex, next_attempt=attempt + 1, error=result.error, timestamp=self.clock()
                )
        return None

    def _tool_call(
        self, call_id: str, name: str, args: dict[str, Any], turn_ex: Execution
    ) -> Iterator[Event]:
        tool_ex = Execution(call_id, "tool", parent_id=turn_ex.id)
        yield ev.tool_exec_start(tool_ex, name, args, timestamp=self.clock())
        tool = self.tools.get(name)
        error: Exception | None = None
        output: Any = None
        if tool is None:
            error = LookupError(f"unknown tool {name!r}")
        else:
            yield ev.tool_invoke_start(tool_ex, name, args, timestamp=self.clock())
            kwargs = dict(args)
            try:
                if _takes_tool_context(tool):
                    if "context" in kwargs:
                        raise TypeError(
                            f"tool {name!r} takes loopscribe's keyword-only context, so the "
                            "model cannot pass it an argument named 'context'; rename one"
                        )
                    kwargs["context"] = ToolContext(self, tool_ex, name)
                output = yield from self._step(tool_ex, functools.partial(tool, **kwargs))
                if inspect.isgenerator(output):
                    output = yield from self._progress(tool_ex, output)
            except Exception as exc:
                error = exc
        text = str(output) if error is None else f"{type(error).__name__}: {error}"
        result = ToolResultMessage(call_id, name, (TextContent(text),), is_error=error is not None)
        yield ev.tool_exec_end(tool_ex, name, result, error=error, timestamp=self.clock())
        yield from self._commit(tool_ex, result)

    def _progress(self, tool_ex: Execution, steps: Iterator[Any]) -> Generator[Event, None, Any]:
        """Relay a generator tool's progress as ``tool_exec_update``; return its result."""
        while True:
            done, value = yield from self._step(tool_ex, _advance, steps)
            if done:
                return value
            yield ev.tool_exec_update(tool_ex, value, timestamp=self.clock())


def checkpoint_turns(run: Run, loop: AgentLoop, events: Iterable[Event]) -> Iterator[Event]:
    """Record ``events`` into ``run``, checkpointing the loop at each boundary.

    After each ``turn_end`` (a committed boundary: every message of the turn
    is written) and after the loop's own ``agent_end`` (the terminal event,
    which follows the after-run hook, so its artifacts are in the state) it
    saves ``loop.state()`` with ``run.save_checkpoint``, which also fsyncs.
    The events are yielded on, for the host's own use::

        for event in checkpoint_turns(run, loop, loop.run("Hi", run=run)):
            ...

    Recording errors propagate (they are sticky on the Session).
    """
    for event in events:
        run.record(event)
        if event.type == ev.TURN_END or (
            event.type == ev.AGENT_END
            and event.execution is not None
            and event.execution.parent_id is None
        ):
            run.save_checkpoint(loop.state())
        yield event

"""The LangChain runs a handler has open, their conversations, and closing what is left open.

:class:`RunTracker` maps each starting LangChain run onto its execution
(nesting, ``with_retry`` and LangGraph ``RetryPolicy`` attempts, tool-call
attempts), commits each message of a conversation once, and ends what a
top-level run left open. The callbacks that feed it are ``_handler``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, ToolMessage, convert_to_messages

from ... import events as ev
from ..._errors import EncodeError
from ..._hostkit import LOGGER, Guard, OpenExecutions, close_left_open, run_ids
from ..._messages import (
    Message,
)
from ..._model import Event, Execution
from ..._session import Run, Session
from ._messages import from_langchain
from ._values import (
    _MAX_DEPTH,
    P,
    _content_key,
    _context_parent,
    _is_command,
    _jsonable,
    _retry_attempt,
)

logger = logging.getLogger(LOGGER)


@dataclasses.dataclass(slots=True)
class _Conversation:
    """What one conversation has committed, to commit each message once.

    A message is known by its id, a tool result also by its ``tool_call_id``,
    and a message committed before it had an id (LangGraph gives ids when it
    adds a message to the state, after the callbacks saw it) by its content,
    claimed once by the first id that comes with the same content.
    """

    execution: Execution | None
    """Where its input and host-made messages are recorded (``None``: the run)."""
    checkpointed: bool = False
    """Requests may carry history loaded from a checkpointer (a LangGraph ``thread_id``)."""
    ids: set[str] = dataclasses.field(default_factory=set)
    tool_calls: set[str] = dataclasses.field(default_factory=set)
    unclaimed: Counter[str] = dataclasses.field(default_factory=Counter)
    anonymous: Counter[str] = dataclasses.field(default_factory=Counter)

    def known(self, message: BaseMessage) -> bool:
        if isinstance(message, ToolMessage) and message.tool_call_id in self.tool_calls:
            if message.id:
                self.ids.add(message.id)
            return True
        if not message.id:
            return False
        if message.id in self.ids:
            return True
        key = _content_key(message)
        if self.unclaimed[key] > 0:
            self.unclaimed[key] -= 1
            self.ids.add(message.id)
            return True
        return False

    def add(self, message: BaseMessage) -> None:
        if isinstance(message, ToolMessage):
            self.tool_calls.add(message.tool_call_id)
        if message.id:
            self.ids.add(message.id)
        else:
            key = _content_key(message)
            self.unclaimed[key] += 1
            self.anonymous[key] += 1


# Conversations of a LangGraph thread, per Session: a second run on the same
# thread_id (a new handler) knows what the first one committed.
_THREADS: weakref.WeakKeyDictionary[Session, dict[str, _Conversation]] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


@dataclasses.dataclass(slots=True)
class _Open:
    """A LangChain run that has started and not ended yet."""

    execution: Execution
    name: str
    parent_run_id: UUID | None
    conversation: _Conversation
    starts: tuple[Event, ...] = ()
    """The records that began the attempt, re-recorded for the next one on ``on_retry``."""
    task: str | None = None
    """The LangGraph task a graph node runs (its ``langgraph_checkpoint_ns``)."""
    namespace: str | None = None
    """The LangGraph checkpoint namespace the run started in."""
    interrupts: list[Any] = dataclasses.field(default_factory=list)
    """Interrupts its children stopped with: the graph that catches them paused."""


@dataclasses.dataclass(slots=True)
class _Child:
    """The latest child run of an open run, to recognize ``with_retry`` attempts."""

    execution: Execution
    error: BaseException | None = None


def _guarded(method: Callable[P, None]) -> Callable[P, None]:
    """Run a callback under the handler's lock; log and count, never raise."""

    @functools.wraps(method)
    def callback(*args: P.args, **kwargs: P.kwargs) -> None:
        handler = cast("RunTracker", args[0])
        try:
            with handler._lock:
                if not handler._closed:
                    method(*args, **kwargs)
        except Exception:
            handler._guard.failed(method.__name__)

    return callback


class RunTracker(BaseCallbackHandler):
    """The state and bookkeeping of :class:`~._handler.LoopscribeCallbackHandler` (see there)."""

    def __init__(self, run: Run) -> None:
        """Record into ``run``."""
        if not isinstance(run, Run):
            raise TypeError(f"run must be a loopscribe.Run, got {type(run).__name__}")
        self._run = run
        self._lock = threading.RLock()
        self._open: OpenExecutions[UUID, _Open] = OpenExecutions()
        self._children: dict[UUID, _Child] = {}
        # The latest attempt of each LangGraph task (a node's run) under each open graph run.
        self._tasks: dict[UUID, dict[str, _Child]] = {}
        # The tool execution of each tool call, to file a result a graph node made for it.
        self._tool_executions: dict[str, Execution] = {}
        # Runs without a graph thread share one conversation per handler.
        self._conversation = _Conversation(None)
        # Execution-id counters and call attempts of the Run, shared by every way in.
        self._ids = run_ids(run)
        self._guard = Guard("LangChain handler")
        self._closed = False

    @property
    def errors(self) -> int:
        """How many callbacks failed (the first was logged at ERROR, none raised)."""
        return self._guard.errors

    @property
    def run(self) -> Run:
        """The run this handler records into."""
        return self._run

    def __repr__(self) -> str:
        return f"<LoopscribeCallbackHandler run={self._run.id} errors={self.errors}>"

    # -- recording helpers ---------------------------------------------------------

    def _record(self, event: Event) -> None:
        self._run.record(event)

    def _codec_ok(self, value: Any) -> bool:
        try:
            self._run.session.codec.dumps(value, strict=True)
        except (EncodeError, TypeError, ValueError):
            return False
        return True

    def _json(self, value: Any) -> Any:
        return _jsonable(value, self._codec_ok)

    def _start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        kind: str,
        name: str,
        *,
        tool_call_id: str | None = None,
        tags: Sequence[str] | None = None,
        named: bool = False,
        conversation: _Conversation | None = None,
        retry_of: _Child | None = None,
    ) -> Execution:
        """Map a starting LangChain run onto its Execution and remember it.

        ``named`` runs (chains, graph nodes, retrievers) get ids made of their
        name and a counter, so a span reads ``chain agent_2``, never a UUID.
        """
        parent = self._open.get(parent_run_id) if parent_run_id is not None else None
        parent_id = parent.execution.id if parent is not None else None
        previous = self._children.get(parent_run_id) if parent_run_id is not None else None
        retry = _retry_attempt(tags)
        if retry_of is not None:
            # A LangGraph RetryPolicy runs the node's task again as a new run.
            execution = dataclasses.replace(
                retry_of.execution, attempt=retry_of.execution.attempt + 1
            )
            self._record(
                ev.retry_scheduled(
                    retry_of.execution, next_attempt=execution.attempt, error=retry_of.error
                )
            )
        elif retry is not None and previous is not None and previous.execution.kind == kind:
            # Runnable.with_retry runs each attempt as a new child run, tagged
            # retry:attempt:N: it is the same call, one attempt later.
            execution = dataclasses.replace(
                previous.execution, attempt=previous.execution.attempt + 1
            )
            self._record(
                ev.retry_scheduled(
                    previous.execution, next_attempt=execution.attempt, error=previous.error
                )
            )
        elif tool_call_id:
            # A tool-call id seen again in this loopscribe run is its next attempt.
            execution = self._ids.call(tool_call_id, kind, parent_id)
        elif named:
            execution = Execution(f"{name}_{self._ids.number(name)}", kind, 1, parent_id)
        else:
            execution = Execution(str(run_id), kind, 1, parent_id)
        if execution.kind == "tool" and tool_call_id:
            # Only IDs that can recur (tool-call IDs) need their attempts counted.
            self._ids.note(execution)
            self._tool_executions[tool_call_id] = execution
        if conversation is None:
            conversation = parent.conversation if parent is not None else self._conversation
        self._open.open(run_id, _Open(execution, name, parent_run_id, conversation))
        if parent_run_id is not None and parent is not None:
            self._children[parent_run_id] = _Child(execution)
        return execution

    def _starting(self, run_id: UUID, *events: Event) -> None:
        """Record the events that begin an attempt and keep them for ``on_retry``."""
        for event in events:
            self._record(event)
        self._open[run_id].starts = events

    def _end(self, run_id: UUID, error: BaseException | None = None) -> _Open | None:
        """Forget an ending run; remember its error for a ``with_retry`` of it."""
        opened = self._open.close(run_id)
        self._children.pop(run_id, None)
        self._tasks.pop(run_id, None)
        if opened is None:
            logger.debug("loopscribe: end of unknown LangChain run %s ignored", run_id)
            return None
        if opened.parent_run_id is None:
            # A top-level run ended: what it left open (a callback LangChain never sent,
            # a cancelled branch) ends with its error, innermost first, before it does.
            self._close_under(run_id, error)
        if error is not None and opened.parent_run_id is not None:
            child = self._children.get(opened.parent_run_id)
            if child is not None and child.execution == opened.execution:
                child.error = error
            if opened.task is not None:
                task = self._tasks.get(opened.parent_run_id, {}).get(opened.task)
                if task is not None and task.execution == opened.execution:
                    task.error = error
        return opened

    def _close_under(self, root: UUID | None, error: BaseException | None) -> None:
        """End the runs still open under ``root`` (under any, for ``None``), innermost first."""
        left: list[UUID] = []
        for key in reversed(list(self._open)):
            above = self._open[key].parent_run_id
            for _ in range(_MAX_DEPTH):
                if root is None or above == root:
                    left.append(key)
                    break
                parent = self._open.get(above)
                if parent is None:
                    break
                above = parent.parent_run_id
        closing = []
        for key in left:
            opened = self._open.close(key)
            self._children.pop(key, None)
            self._tasks.pop(key, None)
            if opened is not None:
                closing.append((opened.execution, opened.name))
        close_left_open(self._guard, self._run, closing, error=error)

    def close(self) -> None:
        """End every run still open (with the toolkit's ``NotEnded`` error); record no more.

        For a host that stops recording while LangChain runs are in flight
        (``uninstall()`` calls it); every later callback is ignored. Never raises.
        """
        try:
            with self._lock:
                if not self._closed:
                    self._close_under(None, None)
                self._closed = True
        except Exception:
            self._guard.failed("close")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    def _pass_up(self, opened: _Open, interrupts: list[Any]) -> None:
        """Hand a stopped run's interrupts to its parent, which ends paused if it catches them."""
        parent = self._open.get(opened.parent_run_id) if opened.parent_run_id else None
        if parent is not None:
            parent.interrupts.extend(interrupts)

    def _parent(self, parent_run_id: UUID | None) -> UUID | None:
        """The run a starting run is nested in, as precisely as LangChain knows it.

        LangChain's config context names the run whose children start now;
        when that is an open run inside the reported parent (or there is no
        reported parent), it is the more precise report of the same place.
        """
        adopted = _context_parent()
        if adopted is None or adopted == parent_run_id or adopted not in self._open:
            return parent_run_id
        if parent_run_id is None:
            return adopted
        above = self._open[adopted].parent_run_id
        for _ in range(_MAX_DEPTH):
            if above is None or above not in self._open:
                break
            if above == parent_run_id:
                return adopted
            above = self._open[above].parent_run_id
        return parent_run_id

    def _conversation_of(self, run_id: UUID) -> _Conversation:
        opened = self._open.get(run_id)
        return opened.conversation if opened is not None else self._conversation

    def _thread(self, thread_id: str, execution: Execution | None) -> _Conversation:
        """The conversation of a LangGraph thread in this Session (shared across runs)."""
        with _SHARED_LOCK:
            threads = _THREADS.setdefault(self._run.session, {})
            conversation = threads.get(thread_id)
            if conversation is None:
                conversation = threads[thread_id] = _Conversation(execution, checkpointed=True)
            return conversation

    def _commit(
        self, conversation: _Conversation, execution: Execution | None, message: BaseMessage
    ) -> Message | dict[str, Any]:
        """Write ``message_end`` for a message the conversation has not committed yet."""
        converted = from_langchain(message)
        if not conversation.known(message):
            conversation.add(message)
            self._record(ev.message_end(execution, converted))
        return converted

    def _commit_request(
        self, conversation: _Conversation, batch: Sequence[BaseMessage], *, inputs: bool = False
    ) -> None:
        """Write ``message_end`` for request messages the conversation has not committed.

        A message with an id that the conversation does not know, in a
        checkpointed thread, is history the checkpointer loaded: it was
        committed by the run that produced it. Messages without an id
        (a system prompt a graph prepends to each request) count by
        content, so a request holding "ok" twice commits the second one.
        ``inputs`` are what a graph was invoked with: never history.
        """
        fresh: list[BaseMessage] = []
        counts: Counter[str] = Counter()
        for message in batch:
            if message.id or (
                isinstance(message, ToolMessage) and message.tool_call_id in conversation.tool_calls
            ):
                if not conversation.known(message):
                    conversation.add(message)
                    if inputs or not conversation.checkpointed:
                        fresh.append(message)
                continue
            key = _content_key(message)
            counts[key] += 1
            # A checkpointed graph is invoked with the new messages alone.
            new_input = inputs and conversation.checkpointed
            if new_input or counts[key] > conversation.anonymous[key]:
                conversation.anonymous[key] += 1
                conversation.unclaimed[key] += 1
                fresh.append(message)
        for message in fresh:
            self._record(ev.message_end(conversation.execution, from_langchain(message)))

    def _input_messages(self, inputs: Any) -> list[BaseMessage]:
        """The messages a graph or chain was invoked with, as LangChain messages."""
        if _is_command(inputs):
            inputs = inputs.update  # a LangGraph Command(resume=..., update=...)
        raw = inputs.get("messages", inputs.get("input")) if isinstance(inputs, Mapping) else inputs
        if isinstance(raw, BaseMessage):
            return [raw]
        if not isinstance(raw, list | tuple):
            return []
        try:
            return convert_to_messages(raw)
        except (ValueError, TypeError, NotImplementedError):
            return [m for m in raw if isinstance(m, BaseMessage)]

    def _extra(self, event: Event, **data: Any) -> Event:
        extra = {k: v for k, v in data.items() if v not in (None, [], {})}
        if not extra:
            return event
        return dataclasses.replace(event, data={**event.data, **extra})

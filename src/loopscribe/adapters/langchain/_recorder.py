"""The LangChain callback handler: per-run state, no conversion code (see ``_messages``)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ParamSpec, cast
from uuid import UUID

import orjson
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage, ToolMessage, convert_to_messages
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, GenerationChunk, LLMResult
from langchain_core.runnables.config import var_child_runnable_config
from pydantic import BaseModel

from ... import events as ev
from ..._errors import EncodeError
from ..._freeze import snapshot_error, strip_secrets
from ..._hostkit import LOGGER, Guard, OpenExecutions, close_left_open, run_ids
from ..._messages import (
    AssistantMessage,
    FileContent,
    Message,
    TextContent,
    Usage,
    UserMessage,
)
from ..._model import Event, Execution
from ..._session import Run, Session
from ._messages import from_langchain, provider_name, usage_of

if TYPE_CHECKING:
    from langchain_core.agents import AgentAction, AgentFinish
    from tenacity import RetryCallState

__all__ = ["LoopscribeCallbackHandler"]

logger = logging.getLogger(LOGGER)

_RETRY_TAG = "retry:attempt:"
_MAX_DEPTH = 64
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
# Invocation parameters under the names the record contract uses.
_CONFIG_NAMES = {
    "max_output_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "max_tokens_to_sample": "max_tokens",
    "num_predict": "max_tokens",
    "stop_sequences": "stop",
}

P = ParamSpec("P")


def _unencodable(value: Any) -> dict[str, str]:
    return snapshot_error(value, TypeError("no JSON form"))


def _never(_: Any) -> bool:
    return False


def _jsonable(value: Any, codec_ok: Callable[[Any], bool], depth: int = 0) -> Any:
    """``value`` as plain JSON; messages lowered, unknown values diagnosed."""
    if value is None or isinstance(value, str | bool | float):
        return value
    if isinstance(value, int):
        # orjson holds 64-bit integers only; a bigger one would fail the write.
        return value if _INT64_MIN <= value <= _UINT64_MAX else str(value)
    if depth > _MAX_DEPTH:
        return snapshot_error(value, RecursionError("nested too deeply"))
    if isinstance(value, BaseMessage):
        return from_langchain(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, codec_ok, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, codec_ok, depth + 1) for v in value]
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, codec_ok, depth + 1)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, UUID | Decimal | PurePath):
        return str(value)
    if codec_ok(value):
        # A type the Session's codec knows: keep it typed.
        return value
    if isinstance(value, BaseModel):
        return _jsonable(dict(value), codec_ok, depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _jsonable(fields, codec_ok, depth + 1)
    return _unencodable(value)


def _content_key(message: BaseMessage) -> str:
    """What a message says, without its id: the same words said again match."""
    raw: Any = [message.type, message.content, getattr(message, "tool_calls", None)]
    try:
        data = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS, default=str)
    except (TypeError, orjson.JSONEncodeError):
        data = repr(raw).encode()
    return hashlib.sha256(data).hexdigest()


def _usage(message: Any, llm_output: Mapping[str, Any] | None) -> Usage | None:
    """Token usage from ``AIMessage.usage_metadata``, else the provider's ``token_usage``."""
    usage = usage_of(getattr(message, "usage_metadata", None))
    if usage is not None:
        return usage
    raw = (llm_output or {}).get("token_usage") or (llm_output or {}).get("usage")
    if isinstance(raw, Mapping):
        inp = raw.get("prompt_tokens", raw.get("input_tokens"))
        out = raw.get("completion_tokens", raw.get("output_tokens"))
        details = raw.get("prompt_tokens_details") or {}
        reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if isinstance(inp, int) or isinstance(out, int):
            return Usage(
                input_tokens=int(inp or 0),
                output_tokens=int(out or 0),
                cache_read_tokens=int(details.get("cached_tokens") or 0),
                reasoning_tokens=int(reasoning or 0),
            )
    return None


def _block_texts(blocks: Sequence[str | Mapping[str, Any]]) -> Iterator[str]:
    """The text of streamed content blocks: strings and ``{"type": "text"}`` blocks."""
    for block in blocks:
        if isinstance(block, str):
            yield block
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            yield block["text"]


def _partial(response: LLMResult) -> Message | dict[str, Any] | None:
    """The streamed content of a failed call, if it produced any."""
    for generations in response.generations:
        for generation in generations:
            if not isinstance(generation, ChatGeneration):
                continue
            message = generation.message
            if message.content or getattr(message, "tool_calls", None):
                return from_langchain(message)
    return None


def _provider(metadata: Mapping[str, Any], serialized: Mapping[str, Any] | None) -> str | None:
    """The well-known provider name; ``None`` when LangChain derived it from the class name."""
    ls_provider = _first_str(metadata.get("ls_provider"))
    if ls_provider is None:
        return None
    ids = (serialized or {}).get("id")
    cls = ids[-1] if isinstance(ids, list) and ids and isinstance(ids[-1], str) else ""
    if ls_provider.lower() in {cls.lower(), cls.lower().replace("chat", "")}:
        return None
    return provider_name(ls_provider)


def _state_messages(output: Any, depth: int = 0) -> list[BaseMessage]:
    """The messages a graph node returned: ``{"messages": [...]}``, a ``Command``, or a list."""
    if depth > 4:
        return []
    if isinstance(output, BaseMessage):
        return [output]
    update = getattr(output, "update", None)
    if update is not None and not isinstance(output, Mapping):
        return _state_messages(update, depth + 1)  # a LangGraph Command
    if isinstance(output, Mapping):
        found = output.get("messages")
        if isinstance(found, BaseMessage):
            return [found]
        return [m for m in found if isinstance(m, BaseMessage)] if isinstance(found, list) else []
    if isinstance(output, list | tuple):
        return [m for item in output for m in _state_messages(item, depth + 1)]
    return []


def _config(params: Mapping[str, Any]) -> dict[str, Any]:
    """Invocation parameters, with the well-known ones under the contract's names."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = _CONFIG_NAMES.get(key, key)
        if name not in out or out[name] is None:
            out[name] = value
    return out


def _document(doc: Document) -> dict[str, Any]:
    out: dict[str, Any] = {"page_content": doc.page_content}
    if doc.metadata:
        out["metadata"] = doc.metadata
    if doc.id:
        out["id"] = doc.id
    return out


def _document_ref(doc: Document) -> FileContent | TextContent:
    """A retrieved document as message content: its source by reference, else its text."""
    source = doc.metadata.get("source") if doc.metadata else None
    if isinstance(source, str) and source:
        return FileContent(uri=source, name=doc.id, modality="document")
    return TextContent(doc.page_content)


def _first_str(*values: Any) -> str | None:
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None


def _serialized_name(serialized: Mapping[str, Any] | None) -> str | None:
    if not serialized:
        return None
    ids = serialized.get("id")
    last = ids[-1] if isinstance(ids, list) and ids else None
    return _first_str(serialized.get("name"), last)


def _retry_attempt(tags: Sequence[str] | None) -> int | None:
    """The attempt number ``Runnable.with_retry`` tags a retried child run with."""
    for tag in tags or ():
        if tag.startswith(_RETRY_TAG):
            number = tag[len(_RETRY_TAG) :]
            if number.isdigit() and int(number) > 1:
                return int(number)
    return None


def _control_flow(error: BaseException) -> str | None:
    """How a LangGraph control-flow exception stopped a run; ``None`` for a real failure.

    LangGraph raises ``GraphBubbleUp`` subclasses through the callbacks to
    pause or redirect a graph: ``interrupt()`` (``GraphInterrupt``), a
    ``Command(graph=Command.PARENT)`` (``ParentCommand``), a drain. The run
    stopped as designed; it did not fail.
    """
    names = {cls.__name__ for cls in type(error).__mro__ if cls.__module__.startswith("langgraph")}
    if "GraphBubbleUp" not in names:
        return None
    if "GraphInterrupt" in names:
        return "interrupted"
    if "ParentCommand" in names:
        return "parent_command"
    if "GraphDrained" in names:
        return "drained"
    return "bubbled_up"


def _interrupt_values(items: Any) -> list[dict[str, Any]]:
    """LangGraph ``Interrupt`` objects as ``{"id", "value"}`` (the value the graph asked with)."""
    if not isinstance(items, list | tuple):
        return []
    out = []
    for item in items:
        if hasattr(item, "value"):
            found = {"id": getattr(item, "id", None), "value": item.value}
            out.append({k: v for k, v in found.items() if v is not None})
    return out


def _interrupts(error: BaseException) -> list[dict[str, Any]]:
    """The interrupts a ``GraphInterrupt`` carries."""
    return [found for arg in error.args for found in _interrupt_values(arg)]


def _context_parent() -> UUID | None:
    """The run LangChain's config context says is the parent of a run starting now.

    Some runnables (``RunnableWithFallbacks`` among them) set their child
    callbacks in the config context and then invoke the child with the
    caller's config, so the child reports the caller's parent (or none).
    """
    config = var_child_runnable_config.get()
    callbacks = config.get("callbacks") if config else None
    parent = getattr(callbacks, "parent_run_id", None)
    return parent if isinstance(parent, UUID) else None


def _is_command(value: Any) -> bool:
    """Whether ``value`` is a LangGraph ``Command`` (a resume, an update), without importing it."""
    cls = type(value)
    return cls.__name__ == "Command" and cls.__module__.startswith("langgraph")


def _outcome_error(retry_state: RetryCallState) -> BaseException | None:
    outcome = retry_state.outcome
    if outcome is None or not outcome.failed:
        return None
    return outcome.exception()


# -- handler state ---------------------------------------------------------------


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
        handler = cast("LoopscribeCallbackHandler", args[0])
        try:
            with handler._lock:
                if not handler._closed:
                    method(*args, **kwargs)
        except Exception:
            handler._guard.failed(method.__name__)

    return callback


class LoopscribeCallbackHandler(BaseCallbackHandler):
    """A LangChain callback handler that records runs into a loopscribe :class:`~loopscribe.Run`.

    Give it in ``config={"callbacks": [handler]}`` (or ``callbacks=`` of a
    model, tool or chain). One handler belongs to one loopscribe run; the
    host opens and closes the Session and the run.

    Args:
        run: The open run to record into.

    Attributes:
        errors: How many callbacks failed (each was logged on the ``loopscribe``
            logger and swallowed).
    """

    raise_error: bool = False
    run_inline: bool = True

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

    # -- chains and agents -----------------------------------------------------------

    @_guarded
    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain (any Runnable, a LangGraph graph or node) started."""
        name = _first_str(kwargs.get("name"), _serialized_name(serialized)) or "chain"
        parent_run_id = self._parent(parent_run_id)
        parent = self._open.get(parent_run_id) if parent_run_id is not None else None
        # A graph or chain run by a tool is an agent of its own with its own conversation.
        own = parent is None or parent.execution.kind == "tool"
        kind = "agent" if own else "chain"
        meta = metadata or {}
        thread_id = _first_str(meta.get("thread_id")) if own else None
        # A graph node (in a graph or a sub-graph) runs in a checkpoint namespace of its
        # own, which its task keeps across RetryPolicy attempts; runs inside the node
        # share the node's namespace.
        namespace = _first_str(meta.get("langgraph_checkpoint_ns"))
        task = None
        if (
            parent is not None
            and namespace != parent.namespace
            and name == meta.get("langgraph_node")
        ):
            task = namespace
        tasks = self._tasks.setdefault(parent_run_id, {}) if task and parent_run_id else {}
        previous = tasks.get(task) if task else None
        execution = self._start(
            run_id,
            parent_run_id,
            kind,
            name,
            tags=tags,
            named=True,
            retry_of=previous if previous is not None and previous.error is not None else None,
        )
        self._open[run_id].namespace = namespace
        if task:
            tasks[task] = _Child(execution)
            self._open[run_id].task = task
        if own:
            scope = None if parent is None else execution
            conversation = self._thread(thread_id, scope) if thread_id and parent is None else None
            if conversation is None:
                conversation = (
                    self._conversation
                    if parent is None
                    else _Conversation(execution, checkpointed=bool(thread_id))
                )
            self._open[run_id].conversation = conversation
        start = self._extra(
            ev.agent_start(execution, name),
            tags=list(tags or ()),
            metadata=self._json(strip_secrets(meta)) if kind == "agent" else None,
            thread_id=thread_id,
            resume=self._json(cast(Any, inputs).resume) if own and _is_command(inputs) else None,
            lc_run_id=str(run_id),
        )
        self._starting(run_id, start)
        if own:
            conversation = self._open[run_id].conversation
            self._commit_request(conversation, self._input_messages(inputs), inputs=True)

    @_guarded
    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain ended; a graph node's new messages are committed (host-made ones too)."""
        parent = self._open.get(parent_run_id) if parent_run_id is not None else None
        opened = self._end(run_id)
        if opened is None:
            return
        if parent is not None and parent.execution.kind == "agent":
            # A graph node: what it returns is written to the graph's state.
            conversation = opened.conversation
            for message in _state_messages(outputs):
                if not conversation.known(message):
                    owner = self._tool_executions.get(getattr(message, "tool_call_id", ""))
                    self._commit(conversation, owner or opened.execution, message)
        pending = outputs.get("__interrupt__") if isinstance(outputs, Mapping) else None
        interrupts = opened.interrupts or self._json(_interrupt_values(pending))
        self._record(
            self._extra(
                ev.agent_end(
                    opened.execution,
                    opened.name,
                    stop_reason="interrupted" if interrupts else None,
                ),
                interrupts=interrupts,
            )
        )

    @_guarded
    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain failed, or a LangGraph node paused the graph (``interrupt()``)."""
        stopped = _control_flow(error)
        opened = self._end(run_id, None if stopped else error)
        if opened is None:
            return
        if stopped is None:
            self._record(ev.agent_end(opened.execution, opened.name, error=error))
            return
        interrupts = self._json(_interrupts(error))
        self._pass_up(opened, interrupts)
        self._record(
            self._extra(
                ev.agent_end(opened.execution, opened.name, stop_reason=stopped),
                interrupts=interrupts,
            )
        )

    @_guarded
    def on_agent_action(
        self,
        action: AgentAction,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """An agent chose a tool (``AgentExecutor`` and hosts that report actions)."""
        opened = self._open.get(run_id)
        data = {
            "tool": action.tool,
            "tool_input": self._json(action.tool_input),
            "log": action.log,
            "tool_call_id": getattr(action, "tool_call_id", None),
        }
        execution = opened.execution if opened is not None else None
        self._record(Event("agent_action", execution, {k: v for k, v in data.items() if v}))

    @_guarded
    def on_agent_finish(
        self,
        finish: AgentFinish,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """An agent produced its final answer."""
        opened = self._open.get(run_id)
        data = {"return_values": self._json(finish.return_values), "log": finish.log}
        execution = opened.execution if opened is not None else None
        self._record(Event("agent_finish", execution, {k: v for k, v in data.items() if v}))

    # -- models ------------------------------------------------------------------

    def _model_start(
        self,
        serialized: Mapping[str, Any] | None,
        messages: Sequence[Any],
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: list[str] | None,
        metadata: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> None:
        meta = metadata or {}
        params = kwargs.get("invocation_params")
        params = dict(params) if isinstance(params, Mapping) else {}
        model = (
            _first_str(
                meta.get("ls_model_name"),
                params.get("model"),
                params.get("model_name"),
                kwargs.get("name"),
                _serialized_name(serialized),
            )
            or "unknown"
        )
        execution = self._start(run_id, parent_run_id, "model", model, tags=tags)
        tools = self._json(params.pop("tools", None) or ())
        stream = params.get("stream", params.get("streaming"))
        config = self._json(_config(params))
        for key in ("temperature", "max_tokens", "stop"):
            # LangChain's own names for the request parameters, when the params lack them.
            if config.get(key) is None and meta.get(f"ls_{key}") is not None:
                config[key] = self._json(meta[f"ls_{key}"])
        start = self._extra(
            ev.model_exec_start(
                execution,
                model,
                provider=_provider(meta, serialized),
                stream=stream if isinstance(stream, bool) else None,
            ),
            tags=list(tags or ()),
            lc_run_id=str(run_id) if execution.id != str(run_id) else None,
        )
        request = ev.model_request(
            execution, messages, tools, config, model=model, codec=self._run.session.codec
        )
        self._starting(run_id, start, request)

    @_guarded
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chat model call started: the new messages, then the request."""
        parent_run_id = self._parent(parent_run_id)
        # LangChain calls this once per message list, so there is exactly one.
        batch = [m for message_list in messages for m in message_list]
        parent = self._open.get(parent_run_id) if parent_run_id is not None else None
        conversation = parent.conversation if parent is not None else self._conversation
        self._commit_request(conversation, batch)
        converted = [from_langchain(m) for m in batch]
        self._model_start(serialized, converted, run_id, parent_run_id, tags, metadata, kwargs)

    @_guarded
    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A text-completion model call started; its prompts are the request's messages."""
        parent_run_id = self._parent(parent_run_id)
        messages = [UserMessage(prompt) for prompt in prompts]
        self._model_start(serialized, messages, run_id, parent_run_id, tags, metadata, kwargs)

    @_guarded
    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A model call succeeded: the response, its usage, then the committed message."""
        opened = self._end(run_id)
        if opened is None:
            return
        execution = opened.execution
        generation = next(iter(response.generations[0]), None) if response.generations else None
        if isinstance(generation, ChatGeneration):
            message: Any = generation.message
            lowered: Any = from_langchain(message)
            metadata = message.response_metadata or {}
        elif generation is not None:
            message = None
            lowered = AssistantMessage((TextContent(generation.text),))
            metadata = {}
        else:
            message = lowered = None
            metadata = {}
        info = (generation.generation_info or {}) if generation is not None else {}
        llm_output = response.llm_output or {}
        self._record(
            ev.model_exec_end(
                execution,
                message=lowered,
                usage=_usage(message, llm_output),
                model=_first_str(
                    metadata.get("model_name"),
                    metadata.get("model"),
                    llm_output.get("model_name"),
                    llm_output.get("model"),
                ),
                stop_reason=_first_str(
                    info.get("finish_reason"),
                    metadata.get("finish_reason"),
                    metadata.get("stop_reason"),
                ),
                response_id=_first_str(
                    metadata.get("id"), llm_output.get("id"), getattr(message, "id", None)
                ),
            )
        )
        if isinstance(generation, ChatGeneration):
            self._commit(opened.conversation, execution, generation.message)

    @_guarded
    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: GenerationChunk | ChatGenerationChunk | None = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A streamed delta: published to live subscribers (a ``Bus``), never written.

        Text arrives as ``token`` (a string, or content blocks whose text
        parts are joined); a tool call's name and argument fragments as the
        chunk's ``tool_call_chunks``.
        """
        opened = self._open.get(run_id)
        if opened is None:
            return
        text = token if isinstance(token, str) else "".join(_block_texts(token))
        if text:
            self._record(ev.message_update(opened.execution, None, delta=text))
        message = getattr(chunk, "message", None)
        for part in getattr(message, "tool_call_chunks", None) or ():
            if not isinstance(part, Mapping):
                continue
            delta = {k: part.get(k) for k in ("id", "name", "args", "index") if part.get(k)}
            if delta:
                delta = {"type": "tool_call", **delta}
                self._record(ev.message_update(opened.execution, None, delta=delta))

    @_guarded
    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A model call failed; a streamed partial message is kept with the error."""
        opened = self._end(run_id, error)
        if opened is None:
            return
        response = kwargs.get("response")
        partial = _partial(response) if isinstance(response, LLMResult) else None
        self._record(ev.model_exec_end(opened.execution, partial_message=partial, error=error))

    # -- tools ---------------------------------------------------------------------

    @_guarded
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool started; LangChain passes the model's ``tool_call_id`` when there is one."""
        parent_run_id = self._parent(parent_run_id)
        name = _first_str(_serialized_name(serialized), kwargs.get("name")) or "tool"
        call_id = _first_str(kwargs.get("tool_call_id"))
        execution = self._start(
            run_id, parent_run_id, "tool", name, tool_call_id=call_id, tags=tags
        )
        args = self._json(inputs) if inputs is not None else input_str
        description = serialized.get("description") if serialized else None
        start = self._extra(
            ev.tool_exec_start(
                execution,
                name,
                args,
                tool_type="function",
                description=description if isinstance(description, str) else None,
            ),
            tags=list(tags or ()),
            lc_run_id=str(run_id) if execution.id != str(run_id) else None,
        )
        self._starting(run_id, start)

    @_guarded
    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool returned a ``ToolMessage`` (``status="error"``: a handled error) or a value."""
        opened = self._end(run_id)
        if opened is None:
            return
        execution = opened.execution
        messages: list[ToolMessage] = []
        if isinstance(output, ToolMessage):
            messages = [output]
        elif (
            isinstance(output, list) and output and all(isinstance(m, ToolMessage) for m in output)
        ):
            messages = list(output)
        converted = [from_langchain(m) for m in messages]
        result: Any = self._json(output) if not messages else converted
        if isinstance(output, ToolMessage):
            result = converted[0]
        is_error = any(m.status == "error" for m in messages)
        self._record(ev.tool_exec_end(execution, opened.name, result, is_error=is_error))
        for message in messages:
            self._commit(opened.conversation, execution, message)

    @_guarded
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool raised (an unhandled ``ToolException`` or any other error), or interrupted."""
        stopped = _control_flow(error)
        opened = self._end(run_id, None if stopped else error)
        if opened is None:
            return
        if stopped is None:
            self._record(ev.tool_exec_end(opened.execution, opened.name, error=error))
            return
        # interrupt() in a tool: the call waits for a Command(resume=...) and runs again then.
        details = {"reason": stopped, "interrupts": self._json(_interrupts(error))}
        self._pass_up(opened, details["interrupts"])
        self._record(
            ev.tool_exec_end(
                opened.execution,
                opened.name,
                details={k: v for k, v in details.items() if v},
                disposition="deferred" if stopped == "interrupted" else stopped,
            )
        )

    # -- retrievers ------------------------------------------------------------------

    @_guarded
    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A retriever was queried: a datastore tool call."""
        parent_run_id = self._parent(parent_run_id)
        name = _first_str(kwargs.get("name"), _serialized_name(serialized)) or "retriever"
        execution = self._start(run_id, parent_run_id, "tool", name, tags=tags, named=True)
        start = self._extra(
            ev.tool_exec_start(execution, name, {"query": query}, tool_type="datastore"),
            tags=list(tags or ()),
            lc_run_id=str(run_id),
        )
        self._starting(run_id, start)

    @_guarded
    def on_retriever_end(
        self,
        documents: Sequence[Document],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A retriever returned documents: their bodies, and their sources as references."""
        opened = self._end(run_id)
        if opened is None:
            return
        docs = [d for d in documents if isinstance(d, Document)]
        self._record(
            ev.tool_exec_end(
                opened.execution,
                opened.name,
                self._json([_document(d) for d in docs]),
                content=[_document_ref(d) for d in docs],
            )
        )

    @_guarded
    def on_retriever_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A retriever raised."""
        opened = self._end(run_id, error)
        if opened is not None:
            self._record(ev.tool_exec_end(opened.execution, opened.name, error=error))

    # -- retries -------------------------------------------------------------------

    @_guarded
    def on_retry(
        self,
        retry_state: RetryCallState,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A run is retried in place (tenacity): end this attempt, start the next.

        The failed attempt ends with its kind's terminal record, then
        ``retry_scheduled``, then the next attempt begins with the same start
        records (for a model: the same request).
        """
        opened = self._open.get(run_id)
        if opened is None:
            return
        failed = opened.execution
        error = _outcome_error(retry_state)
        if failed.kind == "model":
            self._record(ev.model_exec_end(failed, error=error or "retry"))
        elif failed.kind == "tool":
            self._record(ev.tool_exec_end(failed, opened.name, error=error or "retry"))
        else:
            self._record(ev.agent_end(failed, opened.name, error=error or "retry"))
        action = retry_state.next_action
        delay_ms = None if action is None else float(action.sleep) * 1000
        nxt = dataclasses.replace(failed, attempt=failed.attempt + 1)
        self._record(
            ev.retry_scheduled(failed, next_attempt=nxt.attempt, delay_ms=delay_ms, error=error)
        )
        if nxt.kind == "tool":
            self._ids.note(nxt)
        opened.execution = nxt
        starts = tuple(dataclasses.replace(e, execution=nxt, timestamp=None) for e in opened.starts)
        self._starting(run_id, *starts)

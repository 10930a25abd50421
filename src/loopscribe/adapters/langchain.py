"""Record LangChain and LangGraph runs with a callback handler.

Pass a :class:`LoopscribeCallbackHandler` wherever LangChain takes callbacks;
every chain, chat model and tool run below that point is recorded into the
loopscribe run::

    from loopscribe import Session
    from loopscribe.adapters.langchain import LoopscribeCallbackHandler

    with Session.create("agent.jsonl") as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        agent.invoke(inputs, config={"callbacks": [handler], "run_name": "weather-bot"})

How LangChain runs become executions (the ID mapping is a pure function of
LangChain's own IDs, so the same framework run always gives the same
executions):

=============================  ==============================================
LangChain run                  ``Execution(id, kind, attempt, parent_id)``
=============================  ==============================================
chain, no parent run           ``(str(run_id), "agent", 1, None)``:
                               ``agent_start`` / ``agent_end``
chain, nested                  ``(str(run_id), "chain", 1, parent)``:
                               ``agent_start`` / ``agent_end``
chat model / LLM               ``(str(run_id), "model", 1, parent)``
tool with a tool call          ``(tool_call_id, "tool", n, parent)``; ``n``
                               counts runs of that call in this recording run
tool without a tool call       ``(str(run_id), "tool", 1, parent)``
``with_retry`` attempt ``k``   the first attempt's ``id``, ``attempt=k``
``on_retry`` (tenacity)        same ``id``, ``attempt + 1``
=============================  ==============================================

``parent`` is the execution ID of ``parent_run_id``, so executions nest
exactly as LangChain nested its runs (``None`` when the parent run was not
seen by this handler). ``run_id`` is the ID LangChain hands every callback
and LangSmith shows; reusing it lets a LangSmith trace and a loopscribe file
be joined, and ``config={"run_id": ...}`` pins it. Tool executions use the
model's tool-call ID instead, so the span's ``gen_ai.tool.call.id`` matches
the ``tool_calls`` of the assistant message that asked for it; their first
record keeps the LangChain ``run_id`` as ``lc_run_id``.

Chains are recorded with ``agent_start``/``agent_end`` because those are the
lifecycle records the span bridge ends a span on; ``kind`` says which is the
invocation (``agent``) and which a step inside it (``chain``), and the data
names the runnable (``agent``: ``"weather-bot"``, ``"RunnableSequence"``,
a LangGraph node). A LangGraph interrupt reaches callbacks as a chain error,
so it is recorded as one (``error.type`` ``GraphInterrupt``).

What is written: the chat model's request (messages, tool declarations,
invocation parameters with credentials removed), its response with token
usage, finish reason and model, or its error with partial content; each
tool's name, arguments and result (``ToolMessage`` or value), or its error;
chain start and end with name, tags and error; ``agent_action`` and
``agent_finish``; retries. LangChain has no notion of a committed
conversation, so ``message_end`` is written for every chat model output,
every ``ToolMessage`` a tool returns, and every message that appears in a
request for the first time (user input, host-made messages) — the latter
without an execution. "First time" counts occurrences, so a user who says
"ok" twice gets two ``message_end`` records.

Messages are written as plain dicts: ``{"role": "user" | "assistant" |
"system" | "tool" | ..., **message.model_dump()}`` without empty fields;
:func:`to_langchain` rebuilds the ``BaseMessage``. Other framework values
(tool outputs, agent actions, config values) are lowered to JSON; a value
with no JSON form becomes a ``snapshot_error`` diagnostic that does not keep
it. Values of types registered with the Session's codec are kept typed.

Not recorded: token streaming (``on_llm_new_token``, ``on_stream_event``:
transient by the recording rules), chain inputs and outputs (intermediate
state; the messages and tool calls they carry are recorded where they are
produced), retriever runs, ``on_text`` and custom events.

The handler is synchronous with ``run_inline = True``: in async code
LangChain calls it directly on the event loop thread (recording is one
unbuffered write), and sync code that runs callbacks on worker threads
(``batch``, ``RunnableParallel``) is serialized by a lock. No separate
``AsyncCallbackHandler`` is needed. The handler never raises into
LangChain: a failure is logged on the ``loopscribe`` logger and counted in
:attr:`LoopscribeCallbackHandler.errors`; a recording failure stays visible
as ``run.session.error``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ParamSpec, cast
from uuid import UUID

import orjson
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from langchain_core.outputs import ChatGeneration, LLMResult
from pydantic import BaseModel

from .. import events as ev
from .._errors import EncodeError
from .._freeze import snapshot_error, strip_secrets
from .._messages import Usage
from .._model import Event, Execution
from .._session import Run

if TYPE_CHECKING:
    from langchain_core.agents import AgentAction, AgentFinish
    from tenacity import RetryCallState

__all__ = ["LoopscribeCallbackHandler", "lower_message", "to_langchain"]

logger = logging.getLogger(__name__)

_RETRY_TAG = "retry:attempt:"
_MAX_DEPTH = 64
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
# Kept on a message even when empty: content is the message, type rebuilds it.
_ALWAYS = frozenset({"content", "type"})

P = ParamSpec("P")


# -- lowering framework values to JSON ------------------------------------------


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, FunctionMessage):
        return "function"
    if isinstance(message, ChatMessage):
        return message.role
    return message.type


def _unencodable(value: Any) -> dict[str, str]:
    return snapshot_error(value, TypeError("no JSON form"))


def lower_message(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as the plain dict loopscribe records.

    ``role`` (``user``, ``assistant``, ``system``, ``tool``, ...) comes first,
    then every non-empty field of ``message.model_dump()``, including
    ``type``, so :func:`to_langchain` can rebuild the message.
    """
    dumped = message.model_dump(mode="json", fallback=_unencodable, warnings=False)
    out: dict[str, Any] = {"role": _role(message)}
    for key, value in dumped.items():
        if key in _ALWAYS or value not in (None, {}, [], False):
            out[key] = value
    # Provider metadata that uses the codec's reserved key is escaped by the codec.
    return out


def to_langchain(message: Mapping[str, Any]) -> BaseMessage:
    """Rebuild a LangChain message from a dict written by this adapter.

    Raises:
        KeyError: ``message`` has no ``type``.
        ValueError: ``type`` names no LangChain message class.
    """
    data = {k: v for k, v in message.items() if k != "role"}
    return messages_from_dict([{"type": message["type"], "data": data}])[0]


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
        return lower_message(value)
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


def _fingerprint(message: BaseMessage, lowered: Mapping[str, Any]) -> str:
    if message.id:
        return f"id:{message.id}"
    try:
        raw = orjson.dumps(lowered, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        raw = repr(lowered).encode()
    return hashlib.sha256(raw).hexdigest()


def _usage(message: Any, llm_output: Mapping[str, Any] | None) -> Usage | None:
    """Token usage from ``AIMessage.usage_metadata``, else the provider's ``token_usage``."""
    meta = getattr(message, "usage_metadata", None)
    if isinstance(meta, Mapping):
        details = meta.get("input_token_details") or {}
        return Usage(
            input_tokens=int(meta.get("input_tokens") or 0),
            output_tokens=int(meta.get("output_tokens") or 0),
            cache_read_tokens=int(details.get("cache_read") or 0),
            cache_write_tokens=int(details.get("cache_creation") or 0),
        )
    raw = (llm_output or {}).get("token_usage") or (llm_output or {}).get("usage")
    if isinstance(raw, Mapping):
        inp = raw.get("prompt_tokens", raw.get("input_tokens"))
        out = raw.get("completion_tokens", raw.get("output_tokens"))
        if isinstance(inp, int) or isinstance(out, int):
            return Usage(input_tokens=int(inp or 0), output_tokens=int(out or 0))
    return None


def _partial(response: LLMResult) -> dict[str, Any] | None:
    """The streamed content of a failed call, if it produced any."""
    for generations in response.generations:
        for generation in generations:
            if not isinstance(generation, ChatGeneration):
                continue
            message = generation.message
            if message.content or getattr(message, "tool_calls", None):
                return lower_message(message)
    return None


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


def _outcome_error(retry_state: RetryCallState) -> BaseException | None:
    outcome = retry_state.outcome
    if outcome is None or not outcome.failed:
        return None
    return outcome.exception()


# -- handler state ---------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Open:
    """A LangChain run that has started and not ended yet."""

    execution: Execution
    name: str
    parent_run_id: UUID | None
    starts: tuple[Event, ...] = ()
    """The records that began the attempt, re-recorded for the next one on ``on_retry``."""


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
                method(*args, **kwargs)
        except Exception:
            with handler._lock:
                handler.errors += 1
            logger.exception("loopscribe LangChain handler failed in %s", method.__name__)

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
        self._open: dict[UUID, _Open] = {}
        self._children: dict[UUID, _Child] = {}
        self._tool_attempts: dict[str, int] = {}
        # Multiplicity of each committed message seen so far (see _commit_new).
        self._seen: Counter[str] = Counter()
        self.errors = 0

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
    ) -> Execution:
        """Map a starting LangChain run onto its Execution and remember it."""
        parent = self._open.get(parent_run_id) if parent_run_id is not None else None
        parent_id = parent.execution.id if parent is not None else None
        previous = self._children.get(parent_run_id) if parent_run_id is not None else None
        retry = _retry_attempt(tags)
        if retry is not None and previous is not None and previous.execution.kind == kind:
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
            attempt = self._tool_attempts.get(tool_call_id, 0) + 1
            execution = Execution(tool_call_id, kind, attempt, parent_id)
        else:
            execution = Execution(str(run_id), kind, 1, parent_id)
        if execution.kind == "tool" and execution.id != str(run_id):
            # Only IDs that can recur (tool-call IDs) need their attempts counted.
            self._tool_attempts[execution.id] = execution.attempt
        self._open[run_id] = _Open(execution, name, parent_run_id)
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
        opened = self._open.pop(run_id, None)
        self._children.pop(run_id, None)
        if opened is None:
            logger.debug("loopscribe: end of unknown LangChain run %s ignored", run_id)
            return None
        if error is not None and opened.parent_run_id is not None:
            child = self._children.get(opened.parent_run_id)
            if child is not None and child.execution == opened.execution:
                child.error = error
        return opened

    def _commit_new(self, lowered: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Write ``message_end`` for request messages not committed before.

        A message counts as new when it occurs in this request more often
        than in any earlier request or output (so a repeated "ok" from the
        user is still seen); the latest occurrences are the new ones.
        """
        counts = Counter(fp for fp, _ in lowered)
        budget = {fp: n - self._seen[fp] for fp, n in counts.items()}
        fresh: list[dict[str, Any]] = []
        for fp, message in reversed(lowered):
            if budget[fp] > 0:
                budget[fp] -= 1
                fresh.append(message)
        for fp, n in counts.items():
            self._seen[fp] = max(self._seen[fp], n)
        for message in reversed(fresh):
            self._record(ev.message_end(None, message))

    def _committed(self, message: BaseMessage) -> dict[str, Any]:
        lowered = lower_message(message)
        self._seen[_fingerprint(message, lowered)] += 1
        return lowered

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
        kind = "agent" if parent_run_id is None else "chain"
        execution = self._start(run_id, parent_run_id, kind, name, tags=tags)
        start = self._extra(
            ev.agent_start(execution, name),
            tags=list(tags or ()),
            metadata=self._json(strip_secrets(metadata or {})) if kind == "agent" else None,
            lc_run_id=str(run_id) if execution.id != str(run_id) else None,
        )
        self._starting(run_id, start)

    @_guarded
    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain ended."""
        opened = self._end(run_id)
        if opened is not None:
            self._record(ev.agent_end(opened.execution, opened.name))

    @_guarded
    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain failed."""
        opened = self._end(run_id, error)
        if opened is not None:
            self._record(ev.agent_end(opened.execution, opened.name, error=error))

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
        config = self._json(params)
        start = self._extra(
            ev.model_exec_start(execution, model, provider=_first_str(meta.get("ls_provider"))),
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
        # LangChain calls this once per message list, so there is exactly one.
        batch = [m for message_list in messages for m in message_list]
        lowered = [lower_message(m) for m in batch]
        self._commit_new([(_fingerprint(m, d), d) for m, d in zip(batch, lowered, strict=True)])
        self._model_start(serialized, lowered, run_id, parent_run_id, tags, metadata, kwargs)

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
        self._model_start(serialized, list(prompts), run_id, parent_run_id, tags, metadata, kwargs)

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
            lowered: Any = self._committed(message)
            metadata = message.response_metadata or {}
        elif generation is not None:
            message = None
            lowered = {"role": "assistant", "content": generation.text}
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
            )
        )
        if isinstance(generation, ChatGeneration):
            self._record(ev.message_end(execution, lowered))

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
        name = _first_str(_serialized_name(serialized), kwargs.get("name")) or "tool"
        call_id = _first_str(kwargs.get("tool_call_id"))
        execution = self._start(
            run_id, parent_run_id, "tool", name, tool_call_id=call_id, tags=tags
        )
        args = self._json(inputs) if inputs is not None else input_str
        start = self._extra(
            ev.tool_exec_start(execution, name, args),
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
        lowered = [self._committed(m) for m in messages]
        result: Any = self._json(output) if not messages else lowered
        if isinstance(output, ToolMessage):
            result = lowered[0]
        is_error = any(m.status == "error" for m in messages)
        self._record(ev.tool_exec_end(execution, opened.name, result, is_error=is_error))
        for message in lowered:
            self._record(ev.message_end(execution, message))

    @_guarded
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool raised (an unhandled ``ToolException`` or any other error)."""
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
        if nxt.id in self._tool_attempts:
            self._tool_attempts[nxt.id] = nxt.attempt
        opened.execution = nxt
        starts = tuple(dataclasses.replace(e, execution=nxt, timestamp=None) for e in opened.starts)
        self._starting(run_id, *starts)

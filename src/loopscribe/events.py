"""The event vocabulary: type names, typed constructors, and what gets written.

Every constructor returns a plain :class:`~loopscribe.Event`; hosts may also
build ``Event(type, execution, data, timestamp)`` themselves.

What a Session writes, per the recorder specification:

==========================  ===================================================
written                      content
==========================  ===================================================
``model_exec_start``         model and provider of a model call
``model_request``            messages, tool declarations, frozen per-call config
``model_route``              a router's choice of model for an attempt; for a
                             failed attempt the router fell through, its
                             ``error`` and ``partial_message``
``model_exec_end``           ``message`` on success, or ``partial_message`` with
                             ``error`` on failure; ``usage``, ``provider_state``
``message_start``            that a message began (without the partial snapshot)
``message_end``              the committed, codec-encoded message
``tool_exec_start``          requested tool and arguments
``tool_invoke_start``        actual arguments after middleware and authorization
``tool_exec_end``            result, rich content, details, error flag, disposition
turn, agent, context, retry  lifecycle facts and summaries, never a full
                             ``state`` snapshot
``guardrail_start``/end      a guardrail's name and kind; whether it tripped,
                             its output info, its own failure
``approval``                 a decision on a tool call (approved or rejected),
                             by whom (``actor``), why, and a bounded summary
                             of the call's arguments
==========================  ===================================================

Not written (transient): ``message_update`` (token deltas and partial
snapshots), ``model_stream``, ``tool_exec_update`` (progress and previews),
and ``model_response`` — except a ``model_response`` carrying a
``length_recovery`` decision, which is written as the decision alone.
Transient events recorded through a run are handed to observers with an
``on_transient`` method (the live ``Bus``) instead.

The Session writes ``session_start``, ``run_start``, ``run_close``,
``run_resume`` (``Session.resume_run``: the run continues after a gap),
``checkpoint``, ``chain_start`` (``Session.open(path, chain=True)``: the
hash chain begins here) and ``session_close`` itself.

Any event may name who did it (``Event(..., actor=Actor(...))``); the
record keeps it (``Record.actor``), beside the run's own actor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ._codec import DEFAULT_CODEC, Codec
from ._freeze import freeze_request
from ._model import Actor, Event, Execution
from .summary import summarize

__all__ = [
    "AGENT_END",
    "AGENT_START",
    "APPROVAL",
    "CHAIN_START",
    "CHECKPOINT",
    "COMPACTION",
    "CONTEXT_TRANSFORM_END",
    "CONTEXT_TRANSFORM_START",
    "GUARDRAIL_END",
    "GUARDRAIL_START",
    "LIFECYCLE",
    "MESSAGE_END",
    "MESSAGE_START",
    "MESSAGE_UPDATE",
    "MODEL_EXEC_END",
    "MODEL_EXEC_START",
    "MODEL_REQUEST",
    "MODEL_RESPONSE",
    "MODEL_ROUTE",
    "MODEL_STREAM",
    "POLICY_TYPES",
    "RESERVED",
    "RETRY_SCHEDULED",
    "RUN_CLOSE",
    "RUN_RESUME",
    "RUN_START",
    "SESSION_CLOSE",
    "SESSION_FACTS",
    "SESSION_START",
    "SESSION_UPDATE",
    "SOURCE_ENTRY",
    "TODOS",
    "TOOL_EXEC_END",
    "TOOL_EXEC_START",
    "TOOL_EXEC_UPDATE",
    "TOOL_INVOKE_START",
    "TRANSIENT",
    "TURN_END",
    "TURN_START",
    "agent_end",
    "agent_start",
    "approval",
    "context_transform_end",
    "context_transform_start",
    "guardrail_end",
    "guardrail_start",
    "message_end",
    "message_start",
    "message_update",
    "model_exec_end",
    "model_exec_start",
    "model_request",
    "model_response",
    "model_route",
    "model_stream",
    "retry_scheduled",
    "tool_exec_end",
    "tool_exec_start",
    "tool_exec_update",
    "tool_invoke_start",
    "turn_end",
    "turn_start",
    "written_data",
]

# Lifecycle records written by the Session itself; hosts cannot publish them.
SESSION_START = "session_start"
RUN_START = "run_start"
RUN_CLOSE = "run_close"
RUN_RESUME = "run_resume"
CHECKPOINT = "checkpoint"
SESSION_CLOSE = "session_close"
"""The seal a hash-chained session writes when it is closed."""
CHAIN_START = "chain_start"
"""Where the hash chain of a file that was not created chained begins."""

# Session-level facts, appended by the workspace (never by rewriting a header).
SESSION_UPDATE = "session_update"
TODOS = "todos"
COMPACTION = "compaction"
SOURCE_ENTRY = "source_entry"
"""A verbatim entry a live store mirrors (the Claude Agent SDK's), kept so it loads back."""
SESSION_FACTS = frozenset({SESSION_UPDATE, TODOS, COMPACTION, SOURCE_ENTRY})

RESERVED = (
    frozenset(
        {SESSION_START, RUN_START, RUN_CLOSE, RUN_RESUME, CHECKPOINT, CHAIN_START, SESSION_CLOSE}
    )
    | SESSION_FACTS
)

MODEL_EXEC_START = "model_exec_start"
MODEL_REQUEST = "model_request"
MODEL_ROUTE = "model_route"
MODEL_STREAM = "model_stream"
MODEL_RESPONSE = "model_response"
MODEL_EXEC_END = "model_exec_end"
MESSAGE_START = "message_start"
MESSAGE_UPDATE = "message_update"
MESSAGE_END = "message_end"
TOOL_EXEC_START = "tool_exec_start"
TOOL_INVOKE_START = "tool_invoke_start"
TOOL_EXEC_UPDATE = "tool_exec_update"
TOOL_EXEC_END = "tool_exec_end"
TURN_START = "turn_start"
TURN_END = "turn_end"
AGENT_START = "agent_start"
AGENT_END = "agent_end"
CONTEXT_TRANSFORM_START = "context_transform_start"
CONTEXT_TRANSFORM_END = "context_transform_end"
RETRY_SCHEDULED = "retry_scheduled"
GUARDRAIL_START = "guardrail_start"
GUARDRAIL_END = "guardrail_end"
APPROVAL = "approval"

TRANSIENT = frozenset({MESSAGE_UPDATE, MODEL_STREAM, TOOL_EXEC_UPDATE})
LIFECYCLE = frozenset(
    {
        TURN_START,
        TURN_END,
        AGENT_START,
        AGENT_END,
        CONTEXT_TRANSFORM_START,
        CONTEXT_TRANSFORM_END,
        RETRY_SCHEDULED,
        GUARDRAIL_START,
        GUARDRAIL_END,
    }
)
POLICY_TYPES = RESERVED | TRANSIENT | LIFECYCLE | {MODEL_RESPONSE, MESSAGE_START, MODEL_REQUEST}
"""Types a run refuses, skips, reduces or freezes; the data of any other type is written as is."""

# Keys that would turn a lifecycle record into an implicit snapshot.
_SNAPSHOT_KEYS = frozenset({"state", "snapshot", "agent_state"})
_PARTIAL_KEYS = frozenset({"message", "partial_message"})


def written_data(event_type: str, data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What a Session writes for an event: its data, a reduced copy, or ``None`` (skip)."""
    if event_type in TRANSIENT:
        return None
    if event_type == MODEL_RESPONSE:
        if data.get("length_recovery") is None:
            return None
        return {k: v for k, v in data.items() if k not in _PARTIAL_KEYS}
    if event_type == MESSAGE_START:
        return {k: v for k, v in data.items() if k not in _PARTIAL_KEYS}
    if event_type in LIFECYCLE and not _SNAPSHOT_KEYS.isdisjoint(data):
        return {k: v for k, v in data.items() if k not in _SNAPSHOT_KEYS}
    return data


def _error(error: BaseException | Mapping[str, Any] | str | None) -> dict[str, Any] | None:
    if error is None:
        return None
    if isinstance(error, BaseException):
        return {"type": type(error).__qualname__, "message": str(error)}
    if isinstance(error, str):
        return {"type": error, "message": ""}
    return dict(error)


def _event(
    kind: str, execution: Execution | None, timestamp: datetime | None, **data: Any
) -> Event:
    return Event(kind, execution, {k: v for k, v in data.items() if v is not None}, timestamp)


def model_exec_start(
    execution: Execution,
    model: str,
    *,
    provider: str | None = None,
    stream: bool | None = None,
    server_address: str | None = None,
    server_port: int | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """A model call began.

    ``provider`` is a well-known provider name (``openai``, ``anthropic``,
    ``aws.bedrock``, ``gcp.gemini``, ...); ``stream`` says whether the
    response is streamed; ``server_address`` and ``server_port`` name the
    endpoint when the host knows it (never with credentials).
    """
    return _event(
        MODEL_EXEC_START,
        execution,
        timestamp,
        model=model,
        provider=provider,
        stream=stream,
        server_address=server_address,
        server_port=server_port,
    )


def model_request(
    execution: Execution,
    messages: Iterable[Any],
    tools: Iterable[Any] = (),
    config: Any = None,
    *,
    model: str | None = None,
    codec: Codec = DEFAULT_CODEC,
    timestamp: datetime | None = None,
) -> Event:
    """The final request after middleware, frozen (see ``freeze_request``).

    The returned event already has credentials removed, so the host's
    in-memory copy holds no secret either.
    """
    return _event(
        MODEL_REQUEST,
        execution,
        timestamp,
        model=model,
        **freeze_request(messages, tools, config, codec),
    )


def model_route(
    execution: Execution,
    model: str,
    *,
    provider: str | None = None,
    reason: str | None = None,
    error: BaseException | Mapping[str, Any] | str | None = None,
    partial_message: Any = None,
    usage: Any = None,
    timestamp: datetime | None = None,
) -> Event:
    """A router chose ``model`` for this attempt, or (with ``error``) that attempt failed.

    A router that falls through to its next model publishes the failed
    attempt's evidence first: ``error`` (its type and message) and the
    ``partial_message`` and ``usage`` received before it failed.
    """
    return _event(
        MODEL_ROUTE,
        execution,
        timestamp,
        model=model,
        provider=provider,
        reason=reason,
        error=_error(error),
        partial_message=partial_message,
        usage=usage,
    )


def model_stream(execution: Execution, chunk: Any, *, timestamp: datetime | None = None) -> Event:
    """Transient progress of an auxiliary model call (never written)."""
    return _event(MODEL_STREAM, execution, timestamp, chunk=chunk)


def model_response(
    execution: Execution,
    message: Any,
    *,
    length_recovery: Mapping[str, Any] | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """The model's response notification; written only with a length-recovery decision."""
    return _event(
        MODEL_RESPONSE,
        execution,
        timestamp,
        message=message,
        length_recovery=None if length_recovery is None else dict(length_recovery),
    )


def model_exec_end(
    execution: Execution,
    *,
    message: Any = None,
    partial_message: Any = None,
    error: BaseException | Mapping[str, Any] | str | None = None,
    usage: Any = None,
    model: str | None = None,
    stop_reason: str | None = None,
    response_id: str | None = None,
    provider_state: Any = None,
    timestamp: datetime | None = None,
) -> Event:
    """A model call ended: ``message`` on success, ``partial_message`` and ``error`` on failure.

    ``model`` is the response model and ``response_id`` the provider's id of
    the response, when the host has them apart from the message.
    """
    return _event(
        MODEL_EXEC_END,
        execution,
        timestamp,
        message=message,
        partial_message=partial_message,
        error=_error(error),
        usage=usage,
        model=model,
        stop_reason=stop_reason,
        response_id=response_id,
        provider_state=provider_state,
    )


def message_start(
    execution: Execution | None, message: Any = None, *, timestamp: datetime | None = None
) -> Event:
    """A conversation message began (its partial snapshot is not written)."""
    return _event(MESSAGE_START, execution, timestamp, message=message)


def message_update(
    execution: Execution | None,
    message: Any,
    *,
    delta: Any = None,
    timestamp: datetime | None = None,
) -> Event:
    """A token delta or partial snapshot (never written)."""
    return _event(MESSAGE_UPDATE, execution, timestamp, message=message, delta=delta)


def message_end(
    execution: Execution | None, message: Any, *, timestamp: datetime | None = None
) -> Event:
    """A message was committed to the conversation."""
    return _event(MESSAGE_END, execution, timestamp, message=message)


def tool_exec_start(
    execution: Execution,
    tool: str,
    args: Any = None,
    *,
    tool_type: str | None = None,
    description: str | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """The model requested ``tool`` with ``args``.

    ``tool_type`` is ``function``, ``extension`` or ``datastore`` (the GenAI
    conventions' values) and ``description`` the tool's declared description,
    when the host knows them.
    """
    return _event(
        TOOL_EXEC_START,
        execution,
        timestamp,
        tool=tool,
        args=args,
        tool_type=tool_type,
        description=description,
    )


def tool_invoke_start(
    execution: Execution,
    tool: str,
    args: Any = None,
    *,
    timestamp: datetime | None = None,
) -> Event:
    """The tool is invoked with its actual arguments, after middleware and authorization."""
    return _event(TOOL_INVOKE_START, execution, timestamp, tool=tool, args=args)


def tool_exec_update(
    execution: Execution, progress: Any, *, timestamp: datetime | None = None
) -> Event:
    """Tool progress or a preview (never written)."""
    return _event(TOOL_EXEC_UPDATE, execution, timestamp, progress=progress)


def tool_exec_end(
    execution: Execution,
    tool: str,
    result: Any = None,
    *,
    content: Any = None,
    details: Any = None,
    is_error: bool = False,
    error: BaseException | Mapping[str, Any] | str | None = None,
    disposition: str | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """The tool finished: its complete result, error flag and disposition."""
    return _event(
        TOOL_EXEC_END,
        execution,
        timestamp,
        tool=tool,
        result=result,
        content=content,
        details=details,
        is_error=is_error or error is not None,
        error=_error(error),
        disposition=disposition,
    )


def turn_start(execution: Execution, turn: int, *, timestamp: datetime | None = None) -> Event:
    """A turn (one model call and its tool calls) began."""
    return _event(TURN_START, execution, timestamp, turn=turn)


def turn_end(
    execution: Execution,
    turn: int,
    *,
    stop_reason: str | None = None,
    tool_calls: int | None = None,
    error: BaseException | Mapping[str, Any] | str | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """A turn ended; ``error`` is set when it failed."""
    return _event(
        TURN_END,
        execution,
        timestamp,
        turn=turn,
        stop_reason=stop_reason,
        tool_calls=tool_calls,
        error=_error(error),
    )


def agent_start(execution: Execution, agent: str, *, timestamp: datetime | None = None) -> Event:
    """The agent loop began."""
    return _event(AGENT_START, execution, timestamp, agent=agent)


def agent_end(
    execution: Execution,
    agent: str,
    *,
    stop_reason: str | None = None,
    error: BaseException | Mapping[str, Any] | str | None = None,
    turns: int | None = None,
    artifacts: Mapping[str, Any] | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """The agent loop ended; ``error`` is set when it failed.

    ``artifacts`` are the artifacts the run staged, by name (codec-registered
    values or plain JSON), after-run writes included: the run's summary
    passes them explicitly.
    """
    return _event(
        AGENT_END,
        execution,
        timestamp,
        agent=agent,
        stop_reason=stop_reason,
        error=_error(error),
        turns=turns,
        artifacts=None if not artifacts else dict(artifacts),
    )


def context_transform_start(
    execution: Execution, *, messages: int | None = None, timestamp: datetime | None = None
) -> Event:
    """Context preparation (compaction, trimming, summarizing) began."""
    return _event(CONTEXT_TRANSFORM_START, execution, timestamp, messages_before=messages)


def context_transform_end(
    execution: Execution,
    *,
    messages: int | None = None,
    summary: Any = None,
    artifacts: Mapping[str, Any] | None = None,
    error: BaseException | Mapping[str, Any] | str | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """Context preparation ended, with its summary and staged artifacts when it made any."""
    return _event(
        CONTEXT_TRANSFORM_END,
        execution,
        timestamp,
        messages_after=messages,
        summary=summary,
        artifacts=None if not artifacts else dict(artifacts),
        error=_error(error),
    )


def retry_scheduled(
    execution: Execution,
    *,
    next_attempt: int,
    delay_ms: float | None = None,
    error: BaseException | Mapping[str, Any] | str | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """The failed attempt ``execution`` will be retried as ``next_attempt``."""
    return _event(
        RETRY_SCHEDULED,
        execution,
        timestamp,
        next_attempt=next_attempt,
        delay_ms=delay_ms,
        error=_error(error),
    )


def guardrail_start(
    execution: Execution,
    guardrail: str,
    *,
    kind: str | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """A guardrail (input, output, tool input, tool output, ...) began checking."""
    data: dict[str, Any] = {"guardrail": guardrail}
    if kind is not None:
        # ``kind`` names _event's own first parameter, so the data is built here.
        data["kind"] = kind
    return Event(GUARDRAIL_START, execution, data, timestamp)


def guardrail_end(
    execution: Execution,
    guardrail: str,
    *,
    triggered: bool | None = None,
    output_info: Any = None,
    behavior: str | None = None,
    error: BaseException | Mapping[str, Any] | str | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """A guardrail finished: whether its tripwire ``triggered``, and what it reported.

    A tripped guardrail is a result, not a failure; ``error`` is set only when
    the guardrail itself failed.
    """
    return _event(
        GUARDRAIL_END,
        execution,
        timestamp,
        guardrail=guardrail,
        triggered=triggered,
        behavior=behavior,
        output_info=output_info,
        error=_error(error),
    )


def approval(
    execution: Execution,
    tool: str,
    *,
    approved: bool,
    args: Any = None,
    reason: str | None = None,
    always: bool | None = None,
    actor: Actor | None = None,
    timestamp: datetime | None = None,
) -> Event:
    """A decision on a tool call that needed approval: who decided what, and why.

    Record it under the tool call's execution (its id is the call id), so
    the decision sits beside the call it allowed or refused.

    Args:
        execution: The tool call's execution.
        tool: The tool's name.
        approved: ``True`` if the call may run, ``False`` if it was rejected.
        args: The call's arguments: stored as a bounded one-line summary
            (``summary``, see :func:`loopscribe.summarize`), enough to tell
            what was approved without copying it (the call's own records
            hold the arguments in full).
        reason: Why, in the approver's words.
        always: The decision also holds for later calls of this tool.
        actor: Who decided (a user, a policy); stored as ``Record.actor``.
        timestamp: When it was decided; ``None`` means now.
    """
    data = {
        "tool": tool,
        "approved": bool(approved),
        "summary": None if args is None else summarize(args),
        "reason": reason,
        "always": always,
    }
    return Event(
        APPROVAL, execution, {k: v for k, v in data.items() if v is not None}, timestamp, actor
    )

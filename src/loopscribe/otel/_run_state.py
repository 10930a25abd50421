"""What the bridge keeps of each open run and execution attempt, read from its records.

Labels, references and times only (model, provider, tool, agent, token counts,
sequence numbers), taken from typed objects, raw JSON and host dicts alike;
never a body. Which record belongs to which attempt, its parent and how it
ended come from the one fold of attempts (``loopscribe._attempts``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from opentelemetry.trace import SpanContext, TraceFlags

from .. import events as ev
from .._attempts import AttemptFold, Key
from .._fields import RequestParams, node_name, provider_name, request_params, response_labels
from .._fields import TokenUsage as _Usage
from .._fields import count as _count
from .._fields import field as _get
from .._fields import plain as _plain
from .._fields import text as _str
from .._format import parse_ts
from .._model import Execution, Record
from ._ids import parse_traceparent, span_id

_MODEL_LABELLED: Final = frozenset({ev.MODEL_EXEC_START, ev.MODEL_ROUTE, ev.MODEL_REQUEST})
"""Records that name a call's model, provider and server."""
_FIRST_CHUNK: Final = frozenset({ev.MODEL_STREAM, ev.MESSAGE_UPDATE})
_MCP_ATTRIBUTES: Final = {
    "method": "mcp.method.name",
    "session_id": "mcp.session.id",
    "protocol_version": "mcp.protocol.version",
    "request_id": "jsonrpc.request.id",
    "transport": "network.transport",
}
"""Keys of a tool record's ``mcp`` object and the MCP semantic conventions' attributes."""
_TOOL_LABELLED: Final = frozenset({ev.TOOL_EXEC_START, ev.TOOL_INVOKE_START, ev.TOOL_EXEC_END})
_AGENT_LABELLED: Final = frozenset({ev.AGENT_START, ev.AGENT_END})
_OPERATIONS: Final = {"model": "chat", "tool": "execute_tool", "agent": "invoke_agent"}
"""Execution kinds that are GenAI operations, and the operation each one is."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _ns(ts: datetime) -> int:
    # Integer arithmetic: a float timestamp would lose nanosecond exactness.
    if ts.tzinfo is None:
        ts = ts.astimezone(UTC)
    return (ts - _EPOCH) // _MICROSECOND * 1000


# -- reading typed objects, raw JSON and host dicts alike ----------------------


def _finish_reason(data: Mapping[str, Any], message: Any) -> tuple[str, ...]:
    reason = _str(_plain(data.get("stop_reason")))
    if reason is None:
        reason = _str(_get(message, "stop_reason")) or _str(_get(message, "finish_reason"))
    if reason is not None:
        return (reason,)
    choices = _get(message, "choices")
    if isinstance(choices, list | tuple):
        found = (_str(_get(choice, "finish_reason")) for choice in choices)
        return tuple(r for r in found if r is not None)
    return ()


def _label(value: Any) -> str | None:
    """``_str(_plain(value))``, with the common cases (a string, nothing) first."""
    if type(value) is str:
        return value or None
    if value is None:
        return None
    return _str(_plain(value))


# -- per-run state ---------------------------------------------------------------


@dataclass(slots=True)
class _Attempt:
    execution: Execution
    span_id: int
    order: int
    start_ns: int
    seq_first: int
    seq_last: int
    parent: SpanContext | None = None
    name: str | None = None
    request_model: str | None = None
    response_model: str | None = None
    response_id: str | None = None
    provider: str | None = None
    stream: bool | None = None
    server_address: str | None = None
    server_port: int | None = None
    params: RequestParams | None = None
    usage: _Usage | None = None
    finish_reasons: tuple[str, ...] = ()
    request_seq: int | None = None
    request_ns: int | None = None
    first_chunk_ns: int | None = None
    has_system: bool = False
    has_tools: bool = False
    informed: tuple[bool, bool] = (False, False)
    response_seq: int | None = None
    tool: str | None = None
    tool_type: str | None = None
    tool_description: str | None = None
    mcp: dict[str, str] | None = None
    agent: str | None = None
    error_type: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    conversation: str | None = None
    """A sub-agent's own conversation ID (the host's), inherited by what runs inside it."""
    compacted: bool = False
    """The first model call after a compaction."""


@dataclass(slots=True)
class _Run:
    session_id: str
    run_id: str
    trace_id: int
    span: SpanContext
    host_parent: SpanContext | None
    start_ns: int
    seq_first: int
    fold: AttemptFold[_Attempt] = field(init=False)
    """The run's execution attempts: the open ones, the latest of each execution."""
    provider: str | None = None
    model: str | None = None
    started: int = 0
    resumed_at: list[int] = field(default_factory=list)
    location: str | None = None
    """``loopscribe.file`` of the run's spans, once known (see ``SpanBridge._location``)."""
    refs: Callable[[int], str | None] | None = None
    """References to the run's records by seq, once the location is known."""
    host: bool = False
    """The run holds spans the host's instrumentation made (see ``_host``): no run span."""


def _resume_from(run: _Run, start: object) -> None:
    """Give a run first seen at its ``run_resume`` what its ``run_start`` said.

    ``start`` is the ``run_start`` reference the record repeats (``seq``,
    ``ts``, ``traceparent``); a record without one keeps the run as it is.
    """
    if not isinstance(start, Mapping):
        return
    seq, ts = start.get("seq"), start.get("ts")
    if type(seq) is int and isinstance(ts, str):
        with contextlib.suppress(ValueError):
            run.start_ns, run.seq_first = _ns(parse_ts(ts)), seq
    host = parse_traceparent(start.get("traceparent"))
    if host is not None:
        run.host_parent, run.trace_id = host, host.trace_id
        run.span = SpanContext(host.trace_id, run.span.span_id, False, _SAMPLED)


def _parent_span(run: _Run, execution: Execution, parent: Key | None) -> SpanContext | None:
    """The span of ``parent`` (the fold's); the run's span when the execution hangs from the
    run; ``None`` while no attempt of its parent has been seen."""
    if parent is None:
        return run.span if run.fold.seen_parent(execution) else None
    running = run.fold.open.get(parent)
    sid = (
        span_id(run.session_id, run.run_id, *parent)
        if running is None
        else running.span_id  # derived already, when the parent started
    )
    return SpanContext(run.trace_id, sid, False, _SAMPLED)


def _has_system(data: Mapping[str, Any]) -> bool:
    """Whether a model request carries system instructions (apart, or as leading messages)."""
    for key in ("system", "instructions", "system_instructions"):
        if data.get(key):
            return True
    messages = data.get("messages")
    if not isinstance(messages, list | tuple) or not messages:
        return False
    first = messages[0]
    role = _get(first, "role")
    if not role and isinstance(first, Mapping):
        role = first.get("$ls")  # a typed message read back raw
    return role in ("system", "developer")


def _update(run: _Run, attempt: _Attempt, record: Record) -> None:
    """Take the references and labels a record holds; never a body."""
    data = record.data
    kind = record.type
    if attempt.source_file is None and "source" in data:
        _take_source(attempt, data)
    if attempt.name is None and attempt.execution.kind not in _OPERATIONS:
        attempt.name = node_name(data)
    if kind in _MODEL_LABELLED:
        # Later records refine earlier ones: a router's choice wins over the
        # model the call started with.
        attempt.request_model = _label(data.get("model")) or attempt.request_model
        attempt.provider = provider_name(_plain(data.get("provider"))) or attempt.provider
        stream = _plain(data.get("stream"))
        if isinstance(stream, bool):
            attempt.stream = stream
        address = _label(data.get("server_address"))
        if address is not None:
            attempt.server_address = address
            attempt.server_port = _count(_plain(data.get("server_port")))
        if kind == ev.MODEL_REQUEST:
            attempt.request_seq = record.seq
            attempt.request_ns = _ns(record.ts)
            attempt.params = request_params(data.get("config")) or attempt.params
            attempt.has_system = _has_system(data)
            tools = _plain(data.get("tools"))
            attempt.has_tools = isinstance(tools, list | tuple | Mapping) and bool(tools)
    elif kind in _FIRST_CHUNK:
        if attempt.first_chunk_ns is None and attempt.request_ns is not None:
            attempt.first_chunk_ns = _ns(record.ts)
    elif kind == ev.MODEL_EXEC_END:
        attempt.response_seq = record.seq
        first = data.get("first_chunk_ts")
        if attempt.first_chunk_ns is None and attempt.request_ns is not None and first:
            with contextlib.suppress(TypeError, ValueError):
                attempt.first_chunk_ns = _ns(parse_ts(str(_plain(first))))
        labels = response_labels(data)
        attempt.response_model = labels.model or attempt.response_model
        attempt.provider = attempt.provider or provider_name(labels.provider)
        attempt.response_id = labels.response_id or attempt.response_id
        attempt.usage = labels.usage
        attempt.finish_reasons = _finish_reason(data, labels.message)
    elif kind in _TOOL_LABELLED:
        attempt.tool = _label(data.get("tool")) or attempt.tool
        attempt.tool_type = _label(data.get("tool_type")) or attempt.tool_type
        attempt.tool_description = _label(data.get("description")) or attempt.tool_description
        mcp = _plain(data.get("mcp"))
        if isinstance(mcp, Mapping) and attempt.mcp is None:
            attempt.mcp = {
                attribute: value
                for key, attribute in _MCP_ATTRIBUTES.items()
                if (value := _str(mcp.get(key))) is not None
            }
    elif kind in _AGENT_LABELLED:
        attempt.agent = attempt.agent or _label(data.get("agent"))
        if kind == ev.AGENT_START and attempt.execution.parent_id is not None:
            own = _label(data.get("conversation_id")) or _label(data.get("agent_id"))
            attempt.conversation = own or attempt.conversation
    if attempt.execution.kind == "model":
        known = (attempt.provider is not None, attempt.request_model is not None)
        if known != attempt.informed:
            # Tell the enclosing agents once per newly known label, not on every record.
            attempt.informed = known
            _inform_agents(run, attempt)


def _inform_agents(run: _Run, model: _Attempt) -> None:
    """Give the enclosing agents (and the run) the provider and model of their first call."""
    run.provider = run.provider or model.provider
    run.model = run.model or model.request_model
    parent_id = model.execution.parent_id
    seen: set[str] = set()
    while parent_id is not None and parent_id not in seen:
        seen.add(parent_id)
        number = run.fold.latest.get(parent_id)
        parent = None if number is None else run.fold.open.get((parent_id, number))
        if parent is None:
            return
        if parent.execution.kind == "agent":
            parent.provider = parent.provider or model.provider
            parent.request_model = parent.request_model or model.request_model
        parent_id = parent.execution.parent_id


def _take_source(attempt: _Attempt, data: Mapping[str, Any]) -> None:
    """The transcript line an imported execution came from: its first ``data.source``."""
    source = _plain(data.get("source"))
    file = _str(_get(source, "file"))
    line = _count(_get(source, "line"))
    if file is not None and line is not None:
        attempt.source_file, attempt.source_line = file, line

"""SpanBridge: written Records in, finished OpenTelemetry spans out.

The bridge is a Session observer. It keeps a little state per open run and
ends a span when the record that finishes it is written:

* one root span per run, ``invoke_agent {agent}``, ended by ``run_close``;
* one span per execution attempt, started by the attempt's first record and
  ended by its terminal record (``model_exec_end``, ``tool_exec_end``,
  ``turn_end``, ``agent_end``, ``context_transform_end``). An attempt still
  open at ``run_close`` ends there, before the run span, and is marked
  ``loopscribe.incomplete``; so does an execution of a host-defined kind
  whose records include none of these types.

``loopscribe.seq.first`` is the record that started a span and
``loopscribe.seq.last`` the one that ended it (for an attempt ended by
``run_close``, that record), so a span's time range is exactly
``[ts(seq.first), ts(seq.last)]``. Records after an attempt's terminal record
(``retry_scheduled``, a late ``message_end``) do not change its span.

Attributes, all optional ones present only when the records say so:

* every span: ``gen_ai.conversation.id``, ``session.id`` and
  ``loopscribe.session.id`` (the session ID), ``loopscribe.run.id``,
  ``loopscribe.seq.first``, ``loopscribe.seq.last``, ``loopscribe.file``;
* run span: ``gen_ai.operation.name=invoke_agent``, ``gen_ai.agent.name``;
  ERROR with ``error.type`` when the top-level ``agent_end`` carries an error;
* every execution span: ``loopscribe.execution.id``, ``.kind``,
  ``.parent_id``, ``loopscribe.attempt``, and ``loopscribe.incomplete`` when
  ``run_close`` ended it; ``loopscribe.source.file`` and
  ``loopscribe.source.line`` when its records name the transcript line they
  were imported from (``data.source = {"file": ..., "line": ...}`` of the
  first record that has one); ERROR with ``error.type`` (``_OTHER`` when the
  failure has no type) when its terminal record has ``error`` or ``is_error``;
* model (``chat {model}``, kind CLIENT): ``gen_ai.operation.name=chat``,
  ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.provider.name``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens`` / ``cache_read.input_tokens`` /
  ``cache_creation.input_tokens``, ``gen_ai.response.finish_reasons``,
  ``gen_ai.input.messages_ref`` / ``gen_ai.output.messages_ref``
  (``file:///...#seq=N`` of the ``model_request`` / ``model_exec_end`` record);
* tool (``execute_tool {tool}``): ``gen_ai.operation.name=execute_tool``,
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` (the execution ID);
* other kinds (``{kind} {id}``, e.g. ``turn turn_1``): ``gen_ai.agent.name``
  for agents. They name no GenAI operation: the run span is the
  ``invoke_agent`` operation, and an agent execution inside it is not a second one.

Everything a span carries is a reference or a small label: IDs, kinds,
model/tool/agent names, token counts, finish reasons, ``error.type``, record
sequence numbers and a ``file://...#seq=N`` URI. Message text, prompts,
arguments, tool output, partial content, snapshots, config values and error
*messages* are never read into a span.

Because spans are emitted only when a record is written, feeding the records
of a file through a fresh bridge (:func:`replay`) emits exactly the spans
the live bridge emitted. That includes interrupted runs: a run whose file
ends without ``run_close`` (the process died) gets spans for the attempts
that finished, and none for its open attempts or for the run itself, live
and on replay alike. Those spans name a run span that was never exported;
backends show them under a missing parent, which is the truthful picture of
a gap.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import (
    SERVICE_NAME,
    TELEMETRY_SDK_LANGUAGE,
    TELEMETRY_SDK_NAME,
    TELEMETRY_SDK_VERSION,
    OTELResourceDetector,
    Resource,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.sdk.version import __version__ as sdk_version
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from .. import events as ev
from .._fields import TokenUsage as _Usage
from .._fields import count as _count
from .._fields import field as _get
from .._fields import plain as _plain
from .._fields import response_labels
from .._fields import text as _str
from .._model import Execution, Record
from .._reader import read
from ._ids import parse_traceparent, run_span_id, span_id, trace_id

logger = logging.getLogger("loopscribe.otel")

TERMINAL_TYPES: Final = frozenset(
    {ev.MODEL_EXEC_END, ev.TOOL_EXEC_END, ev.TURN_END, ev.AGENT_END, ev.CONTEXT_TRANSFORM_END}
)
"""Record types that end their execution attempt's span."""

# Attribute keys. Spelled out rather than imported from the semantic-conventions
# package, whose GenAI constants are deprecated there (and warn) as they move.
OPERATION_NAME = "gen_ai.operation.name"
CONVERSATION_ID = "gen_ai.conversation.id"
SESSION_ID = "session.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
PROVIDER_NAME = "gen_ai.provider.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
AGENT_NAME = "gen_ai.agent.name"
INPUT_MESSAGES_REF = "gen_ai.input.messages_ref"
OUTPUT_MESSAGES_REF = "gen_ai.output.messages_ref"
ERROR_TYPE = "error.type"
LS_SESSION_ID = "loopscribe.session.id"
LS_RUN_ID = "loopscribe.run.id"
LS_EXECUTION_ID = "loopscribe.execution.id"
LS_EXECUTION_KIND = "loopscribe.execution.kind"
LS_PARENT_ID = "loopscribe.execution.parent_id"
LS_ATTEMPT = "loopscribe.attempt"
LS_SEQ_FIRST = "loopscribe.seq.first"
LS_SEQ_LAST = "loopscribe.seq.last"
LS_FILE = "loopscribe.file"
REF_BASE_ENV = "LOOPSCRIBE_REF_BASE"
"""Environment variable: the default ``ref_base`` of every SpanBridge."""
LS_INCOMPLETE = "loopscribe.incomplete"
LS_SOURCE_FILE = "loopscribe.source.file"
LS_SOURCE_LINE = "loopscribe.source.line"

OTHER_ERROR = "_OTHER"
"""``error.type`` when a failure carries no usable type (the conventions' fallback)."""

# The run span is the invoke_agent operation; an agent execution inside it is
# not counted as a second one, so only these kinds name an operation.
_OPERATIONS: Final = {"model": "chat", "tool": "execute_tool"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")


def _scope() -> InstrumentationScope:
    try:
        version = importlib.metadata.version("loopscribe")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        version = "0+unknown"
    return InstrumentationScope("loopscribe", version)


def default_resource() -> Resource:
    """The Resource spans get unless one is given: deterministic, so replay matches live.

    ``service.name`` is ``loopscribe`` unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` say otherwise. Unlike ``Resource.create()``
    it has no random ``service.instance.id``, which would make a replay in
    another process differ from the live export.
    """
    base = Resource(
        {
            SERVICE_NAME: "loopscribe",
            TELEMETRY_SDK_LANGUAGE: "python",
            TELEMETRY_SDK_NAME: "opentelemetry",
            TELEMETRY_SDK_VERSION: sdk_version,
        }
    )
    return base.merge(OTELResourceDetector().detect())


def to_file_uri(location: str | os.PathLike[str]) -> str:
    """A URI for a session file: a URI string is kept, a path becomes ``file://``.

    The path is made absolute without resolving symlinks, the way
    ``Session.path`` is, so a live bridge and a replay name the file alike.
    """
    if isinstance(location, str) and _URI_SCHEME.match(location):
        return location
    return Path(location).absolute().as_uri()


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


def _error_type(data: Mapping[str, Any]) -> str | None:
    """The failure's type name, never its message; ``None`` when nothing failed."""
    error = _plain(data.get("error"))
    if error is not None and error is not False:
        return _str(_get(error, "type")) or OTHER_ERROR
    if data.get("is_error") is True:
        return OTHER_ERROR
    return None


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
    request_model: str | None = None
    response_model: str | None = None
    provider: str | None = None
    usage: _Usage | None = None
    finish_reasons: tuple[str, ...] = ()
    request_seq: int | None = None
    response_seq: int | None = None
    tool: str | None = None
    agent: str | None = None
    error_type: str | None = None
    source_file: str | None = None
    source_line: int | None = None


@dataclass(slots=True)
class _Run:
    session_id: str
    run_id: str
    trace_id: int
    span: SpanContext
    host_parent: SpanContext | None
    start_ns: int
    seq_first: int
    agent: str | None = None
    error_type: str | None = None
    attempts: dict[tuple[str, int], _Attempt] = field(default_factory=dict)
    latest: dict[str, int] = field(default_factory=dict)
    ended: set[tuple[str, int]] = field(default_factory=set)
    started: int = 0
    resumed_at: list[int] = field(default_factory=list)


class SpanBridge:
    """A Session observer that turns written Records into OpenTelemetry spans.

    Pass it to ``Session.create`` or ``Session.open``; it hands every span it
    ends to ``processor.on_end`` (normally :func:`default_processor`)::

        processor = default_processor(path)
        bridge = SpanBridge(processor, file_uri=path)
        with Session.create(path, observers=[bridge]) as session:
            ...
        processor.shutdown()

    Span and trace IDs are derived from the coordinates (see
    :func:`trace_id`, :func:`span_id`); a run begun with
    ``begin_run(parent=...)`` joins the host's trace and its root span's
    parent is the host span. Spans are always sampled: the session file is
    complete, so its spans are too, even below an unsampled host span.

    The bridge never raises into the recorder. A record it cannot handle is
    logged and counted in :attr:`failed_records`; a span the processor
    refuses is logged and counted in :attr:`dropped_spans`.

    One bridge serves one session file (``file_uri`` names it). Attach it
    before ``begin_run``: records of a run whose ``run_start`` it did not see
    still make spans, but without the host trace.

    Args:
        processor: Receives each finished span through ``on_end``. It is
            called on the recording thread, so it must not block: use a
            ``BatchSpanProcessor`` outside tests.
        resource: The spans' Resource; default :func:`default_resource`.
        file_uri: The session file, as a path or a URI, for the
            ``loopscribe.file`` and ``gen_ai.*.messages_ref`` attributes.
            Without it those attributes are left out.
        ref_base: Where references point instead of the local file, so they
            resolve on other machines: a store URL that ``loopscribe ship``
            writes to (``s3://bucket/prefix`` gives
            ``s3://bucket/prefix/sessions/<id>#seq=N``), or a URL template
            with ``{session_id}`` and ``{seq}`` (a team viewer:
            ``https://viewer.example/session/{session_id}/record/{seq}``).
            Default: the ``LOOPSCRIBE_REF_BASE`` environment variable, if set.
    """

    def __init__(
        self,
        processor: SpanProcessor,
        *,
        resource: Resource | None = None,
        file_uri: str | os.PathLike[str] | None = None,
        ref_base: str | None = None,
    ) -> None:
        self._processor = processor
        self._resource = default_resource() if resource is None else resource
        self._file = None if file_uri is None else to_file_uri(file_uri)
        self._ref_base = (ref_base or os.environ.get(REF_BASE_ENV) or "").rstrip("/") or None
        self._scope = _scope()
        self._limits = SpanLimits()
        self._runs: dict[tuple[str, str], _Run] = {}
        self._lock = threading.Lock()
        self.spans_emitted = 0
        """Spans handed to the processor."""
        self.dropped_spans = 0
        """Spans the processor raised on (each was logged)."""
        self.failed_records = 0
        """Records the bridge could not handle (each was logged)."""

    @property
    def file(self) -> str | None:
        """The session file's URI, if known."""
        return self._file

    def _location(self, session_id: str) -> str | None:
        """``loopscribe.file``: the shipped location with a store ``ref_base``, else the file."""
        base = self._ref_base
        if base is not None and "{" not in base:
            return f"{base}/sessions/{session_id}"
        return self._file

    def _ref(self, session_id: str, seq: int) -> str | None:
        """A reference to one record: in the store, in a viewer, or in the local file."""
        base = self._ref_base
        if base is not None and "{" in base:
            return base.format(session_id=session_id, seq=seq)
        location = self._location(session_id)
        return None if location is None else f"{location}#seq={seq}"

    def __call__(self, record: Record) -> None:
        """Observe one written Record; end the spans it completes."""
        try:
            with self._lock:
                spans = self._observe(record)
        except Exception:
            with self._lock:
                self.failed_records += 1
            logger.exception(
                "loopscribe span bridge could not handle seq %d (%s) of session %s",
                record.seq,
                record.type,
                record.session_id,
            )
            return
        # Outside the lock: a processor that records into an observed session
        # must not deadlock the bridge.
        for span in spans:
            try:
                self._processor.on_end(span)
            except Exception:
                with self._lock:
                    self.dropped_spans += 1
                logger.exception("span processor %r failed on span %r", self._processor, span.name)
            else:
                with self._lock:
                    self.spans_emitted += 1

    # -- state machine -------------------------------------------------------

    def _observe(self, record: Record) -> list[ReadableSpan]:
        run_id = record.run_id
        if run_id is None:
            return []
        key = (record.session_id, run_id)
        if record.type == ev.RUN_START:
            # One open run per session: another open one was interrupted, and
            # the live bridge that saw it died with it. Drop it the same way.
            for stale in [k for k in self._runs if k[0] == record.session_id]:
                del self._runs[stale]
            self._runs[key] = self._new_run(
                record, parse_traceparent(record.data.get("traceparent"))
            )
            return []
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self._new_run(record, None)
        if record.type == ev.RUN_CLOSE:
            del self._runs[key]
            return self._close_run(run, record)
        if record.type == ev.RUN_RESUME:
            # A later writer continued the run: what happened in between is unrecorded.
            run.resumed_at.append(record.seq)
            return []
        execution = record.execution
        if execution is None:
            return []
        if record.type in (ev.AGENT_START, ev.AGENT_END) and execution.parent_id is None:
            # The top-level agent names the run and decides its status.
            run.agent = run.agent or _str(_plain(record.data.get("agent")))
            if record.type == ev.AGENT_END:
                run.error_type = _error_type(record.data)
        attempt_key = (execution.id, execution.attempt)
        if attempt_key in run.ended:
            # A late record for a finished attempt (retry_scheduled, message_end).
            return []
        attempt = run.attempts.get(attempt_key)
        if attempt is None:
            attempt = self._new_attempt(run, record, execution)
            run.attempts[attempt_key] = attempt
        attempt.seq_last = record.seq
        _update(attempt, record)
        if record.type not in TERMINAL_TYPES:
            return []
        del run.attempts[attempt_key]
        run.ended.add(attempt_key)
        return [self._attempt_span(run, attempt, _ns(record.ts), incomplete=False)]

    def _new_run(self, record: Record, host: SpanContext | None) -> _Run:
        session_id, run_id = record.session_id, record.run_id or ""
        tid = trace_id(session_id, run_id) if host is None else host.trace_id
        own = SpanContext(tid, run_span_id(session_id, run_id), False, _SAMPLED)
        return _Run(session_id, run_id, tid, own, host, _ns(record.ts), record.seq)

    def _new_attempt(self, run: _Run, record: Record, execution: Execution) -> _Attempt:
        attempt = _Attempt(
            execution=execution,
            span_id=span_id(run.session_id, run.run_id, execution.id, execution.attempt),
            order=run.started,
            start_ns=_ns(record.ts),
            seq_first=record.seq,
            seq_last=record.seq,
        )
        run.started += 1
        # Resolve the parent while it is running; if it has not appeared yet,
        # try again when this attempt ends.
        attempt.parent = _parent(run, attempt)
        run.latest[execution.id] = execution.attempt
        return attempt

    def _close_run(self, run: _Run, record: Record) -> list[ReadableSpan]:
        end_ns = _ns(record.ts)
        # Newest first, so nested work ends before what contains it.
        still_open = sorted(run.attempts.values(), key=lambda a: a.order, reverse=True)
        spans = []
        for attempt in still_open:
            # seq.last always names the record that ended the span, here run_close:
            # an exporter resuming from a seq cursor must not skip this span.
            attempt.seq_last = record.seq
            spans.append(self._attempt_span(run, attempt, end_ns, incomplete=True))
        spans.append(self._run_span(run, record, end_ns))
        return spans

    # -- span construction -------------------------------------------------------

    @staticmethod
    def _common(run: _Run, operation: str | None) -> dict[str, AttributeValue]:
        attrs: dict[str, AttributeValue] = {} if operation is None else {OPERATION_NAME: operation}
        attrs[CONVERSATION_ID] = run.session_id
        attrs[SESSION_ID] = run.session_id
        attrs[LS_SESSION_ID] = run.session_id
        attrs[LS_RUN_ID] = run.run_id
        return attrs

    def _run_span(self, run: _Run, record: Record, end_ns: int) -> ReadableSpan:
        attrs = self._common(run, "invoke_agent")
        if run.agent:
            attrs[AGENT_NAME] = run.agent
        attrs[LS_SEQ_FIRST] = run.seq_first
        attrs[LS_SEQ_LAST] = record.seq
        _put(attrs, LS_FILE, self._location(run.session_id))
        if run.error_type:
            attrs[ERROR_TYPE] = run.error_type
        if run.resumed_at:
            attrs["loopscribe.run.resumed_at_seq"] = tuple(run.resumed_at)
        name = f"invoke_agent {run.agent}" if run.agent else "invoke_agent"
        return self._span(
            name, run.span, run.host_parent, attrs, run.start_ns, end_ns, run.error_type
        )

    def _attempt_span(
        self, run: _Run, attempt: _Attempt, end_ns: int, *, incomplete: bool
    ) -> ReadableSpan:
        ex = attempt.execution
        parent = attempt.parent or _parent(run, attempt) or run.span
        operation = _OPERATIONS.get(ex.kind)
        attrs = self._common(run, operation)
        kind = SpanKind.INTERNAL
        if ex.kind == "model":
            kind = SpanKind.CLIENT
            model = attempt.request_model or attempt.response_model
            name = f"chat {model}" if model else "chat"
            _put(attrs, REQUEST_MODEL, attempt.request_model)
            _put(attrs, RESPONSE_MODEL, attempt.response_model)
            _put(attrs, PROVIDER_NAME, attempt.provider)
            if attempt.usage is not None:
                _put(attrs, INPUT_TOKENS, attempt.usage.input_tokens)
                _put(attrs, OUTPUT_TOKENS, attempt.usage.output_tokens)
                _put(attrs, CACHE_READ_TOKENS, attempt.usage.cache_read or None)
                _put(attrs, CACHE_CREATION_TOKENS, attempt.usage.cache_creation or None)
            if attempt.finish_reasons:
                attrs[FINISH_REASONS] = attempt.finish_reasons
            if attempt.request_seq is not None:
                _put(attrs, INPUT_MESSAGES_REF, self._ref(run.session_id, attempt.request_seq))
            if attempt.response_seq is not None:
                _put(attrs, OUTPUT_MESSAGES_REF, self._ref(run.session_id, attempt.response_seq))
        elif ex.kind == "tool":
            name = f"execute_tool {attempt.tool}" if attempt.tool else "execute_tool"
            _put(attrs, TOOL_NAME, attempt.tool)
            attrs[TOOL_CALL_ID] = ex.id
        else:
            name = f"{ex.kind} {ex.id}"
            _put(attrs, AGENT_NAME, attempt.agent)
        attrs[LS_EXECUTION_ID] = ex.id
        attrs[LS_EXECUTION_KIND] = ex.kind
        _put(attrs, LS_PARENT_ID, ex.parent_id)
        attrs[LS_ATTEMPT] = ex.attempt
        attrs[LS_SEQ_FIRST] = attempt.seq_first
        attrs[LS_SEQ_LAST] = attempt.seq_last
        _put(attrs, LS_FILE, self._location(run.session_id))
        _put(attrs, LS_SOURCE_FILE, attempt.source_file)
        _put(attrs, LS_SOURCE_LINE, attempt.source_line)
        if incomplete:
            attrs[LS_INCOMPLETE] = True
        _put(attrs, ERROR_TYPE, attempt.error_type)
        context = SpanContext(run.trace_id, attempt.span_id, False, _SAMPLED)
        return self._span(
            name,
            context,
            parent,
            attrs,
            attempt.start_ns,
            end_ns,
            attempt.error_type,
            kind=kind,
        )

    def _span(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attrs: dict[str, AttributeValue],
        start_ns: int,
        end_ns: int,
        error_type: str | None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> ReadableSpan:
        # ReadableSpan skips the SDK's span limits; apply them here.
        # Every value is a str, int, bool or tuple of str the bridge built
        # itself, so the SDK's type cleaning has nothing to do; only limits can.
        limits = self._limits
        if limits.max_span_attribute_length is None and (
            limits.max_span_attributes is None or len(attrs) <= limits.max_span_attributes
        ):
            bounded: Mapping[str, AttributeValue] = attrs
        else:
            bounded = BoundedAttributes(
                limits.max_span_attributes,
                attrs,
                immutable=True,
                max_value_len=limits.max_span_attribute_length,
            )
        # A description could only come from an error message; never set one.
        status = Status(StatusCode.ERROR) if error_type else Status(StatusCode.UNSET)
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=bounded,
            kind=kind,
            status=status,
            start_time=start_ns,
            # Source clocks can disagree; a span never ends before it starts.
            end_time=max(start_ns, end_ns),
            instrumentation_scope=self._scope,
        )


def _put(attrs: dict[str, AttributeValue], key: str, value: str | int | None) -> None:
    if value is not None:
        attrs[key] = value


def _parent(run: _Run, attempt: _Attempt) -> SpanContext | None:
    """The latest attempt seen of the parent execution, or ``None`` if none was seen.

    An execution without ``parent_id`` belongs directly under the run span.
    """
    parent_id = attempt.execution.parent_id
    if parent_id is None:
        return run.span
    parent_attempt = run.latest.get(parent_id)
    if parent_attempt is None:
        return None
    sid = span_id(run.session_id, run.run_id, parent_id, parent_attempt)
    if sid == attempt.span_id:
        return run.span
    return SpanContext(run.trace_id, sid, False, _SAMPLED)


def _update(attempt: _Attempt, record: Record) -> None:
    """Take the references and labels a record holds; never a body."""
    data = record.data
    kind = record.type
    if attempt.source_file is None and "source" in data:
        _take_source(attempt, data)
    if kind in (ev.MODEL_EXEC_START, ev.MODEL_ROUTE, ev.MODEL_REQUEST):
        # Later records refine earlier ones: a router's choice wins over the
        # model the call started with.
        attempt.request_model = _str(_plain(data.get("model"))) or attempt.request_model
        attempt.provider = _str(_plain(data.get("provider"))) or attempt.provider
        if kind == ev.MODEL_REQUEST:
            attempt.request_seq = record.seq
    elif kind == ev.MODEL_EXEC_END:
        attempt.response_seq = record.seq
        labels = response_labels(data)
        attempt.response_model = labels.model or attempt.response_model
        attempt.provider = attempt.provider or labels.provider
        attempt.usage = labels.usage
        attempt.finish_reasons = _finish_reason(data, labels.message)
    elif kind in (ev.TOOL_EXEC_START, ev.TOOL_INVOKE_START, ev.TOOL_EXEC_END):
        attempt.tool = _str(_plain(data.get("tool"))) or attempt.tool
    elif kind in (ev.AGENT_START, ev.AGENT_END):
        attempt.agent = attempt.agent or _str(_plain(data.get("agent")))
    if kind in TERMINAL_TYPES:
        attempt.error_type = _error_type(data)


def _take_source(attempt: _Attempt, data: Mapping[str, Any]) -> None:
    """The transcript line an imported execution came from: its first ``data.source``."""
    source = _plain(data.get("source"))
    file = _str(_get(source, "file"))
    line = _count(_get(source, "line"))
    if file is not None and line is not None:
        attempt.source_file, attempt.source_line = file, line


def replay(
    path: str | os.PathLike[str],
    processor: SpanProcessor,
    *,
    resource: Resource | None = None,
    file_uri: str | os.PathLike[str] | None = None,
    ref_base: str | None = None,
) -> int:
    """Emit the spans of a session file, exactly as a live :class:`SpanBridge` did.

    Records are read without decoding typed values, so no codec
    registrations are needed; the bridge reads the same field names from the
    raw JSON as from the typed objects it saw live.

    A run without ``run_close`` (interrupted, or still being written) gets
    the spans of its finished attempts only, the same as the live bridge
    emitted before the process stopped; see the module documentation.
    The processor is neither flushed nor shut down.

    Args:
        path: The session file.
        processor: Receives each span through ``on_end``.
        resource: The spans' Resource; default :func:`default_resource`.
        file_uri: How spans name the file; default ``path`` as a ``file://`` URI.
            Give the live bridge's value if it differed.
        ref_base: As for :class:`SpanBridge`.

    Returns:
        The number of spans handed to the processor.

    Raises:
        CorruptRecordError: A complete line of the file is damaged.
        UnsupportedVersionError: The file's format version is not supported.
        OSError: The file cannot be read.
    """
    bridge = SpanBridge(
        processor,
        resource=resource,
        file_uri=path if file_uri is None else file_uri,
        ref_base=ref_base,
    )
    for record in read(path, decode=False):
        bridge(record)
    return bridge.spans_emitted

"""SpanBridge: written Records in, finished OpenTelemetry spans out.

The bridge is a Session observer. It keeps a little state per open run and
ends a span when the record that finishes it is written:

* one root span per run, ``invoke_agent {agent}``, ended by ``run_close``;
* one span per execution attempt, started by the attempt's first record and
  ended by its terminal record (``model_exec_end``, ``tool_exec_end``,
  ``turn_end``, ``agent_end``, ``context_transform_end``, ``guardrail_end``). An attempt still
  open at ``run_close`` ends there, before the run span, and is marked
  ``loopscribe.incomplete``; so does an execution of a host-defined kind
  whose records include none of these types.

``loopscribe.seq.first`` is the record that started a span and
``loopscribe.seq.last`` the one that ended it (for an attempt ended by
``run_close``, that record), so a span's time range is exactly
``[ts(seq.first), ts(seq.last)]``. Records after an attempt's terminal record
(``retry_scheduled``, a late ``message_end``) do not change its span.

Names, kinds and attributes (the full table, with the record field behind
each attribute, is ``docs/semconv.md``):

* run span, ``invoke_agent {agent}``: the run is the top-level agent invocation;
* ``model`` executions, ``chat {model}`` (kind CLIENT); ``tool`` executions,
  ``execute_tool {tool}``; ``agent`` executions (nested agents, sub-agents,
  handoffs, agents used as tools), ``invoke_agent {agent}``. Each carries
  ``gen_ai.operation.name`` and the GenAI attributes its records give: models,
  ``gen_ai.provider.name`` (normalised to the conventions' well-known values),
  response ID, finish reasons, token counts, request parameters, streaming,
  ``server.address``/``server.port``, tool type and description;
* every other execution (turns, graph nodes, chains, guardrails) is named by
  its node's name or its kind (``turn``), never by an ID, and carries
  ``openinference.span.kind`` (``CHAIN``, or ``GUARDRAIL``/``RETRIEVER``/
  ``EMBEDDING`` for those kinds) so that Phoenix and Langfuse can type it; it
  names no GenAI operation;
* every span: ``gen_ai.conversation.id`` and ``session.id`` (the session ID:
  the conventions' name and the one Phoenix and Langfuse group sessions by),
  ``loopscribe.run.id``, ``loopscribe.seq.first``, ``loopscribe.seq.last``,
  ``loopscribe.execution.*`` and ``loopscribe.attempt`` for executions, and the
  file: ``loopscribe.file``, or, on a chat span, the ``gen_ai.*_ref``
  attributes (``file:///...#seq=N``), which name it already;
* ERROR with ``error.type`` when the terminal record has ``error`` or ``is_error``.

Each reference is written once. Message text, prompts, arguments, tool output,
partial content, snapshots and error *messages* are never read into a span;
the request's sampling parameters (temperature, max tokens, ...) are.

A span the host's own instrumentation made (an execution ``otel:<span id>``
that the intake recorded, see ``_host``) is not rebuilt from its records:
its ``host_span`` record holds it as it was handed on, and that is what the
bridge emits, IDs and all; its run emits no run span.

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

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from .. import events as ev
from .._attempts import ENDED, LATE, AttemptFold, Key
from .._fields import (
    RequestParams,
    node_name,
    provider_name,
    request_params,
    response_labels,
    span_name,
)
from .._fields import TokenUsage as _Usage
from .._fields import count as _count
from .._fields import field as _get
from .._fields import plain as _plain
from .._fields import text as _str
from .._format import parse_ts
from .._model import Execution, Record
from .._reader import read
from ._host import HOST_SPAN, span_from_record_data
from ._ids import host_span_id, parse_traceparent, run_span_id, span_id, trace_id
from ._metrics import OTHER_PROVIDER, GenAIMetrics, host_meter_provider, semconv_mode
from ._resource import default_resource, hashed, scope

if TYPE_CHECKING:
    from ._metrics_export import EmbeddedMetrics

logger = logging.getLogger("loopscribe.otel")

# Attribute keys. Spelled out rather than imported from the semantic-conventions
# package, whose GenAI constants are deprecated there (and warn) as they move.
OPERATION_NAME = "gen_ai.operation.name"
CONVERSATION_ID = "gen_ai.conversation.id"
SESSION_ID = "session.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_STREAM = "gen_ai.request.stream"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_TOP_K = "gen_ai.request.top_k"
REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
REQUEST_SEED = "gen_ai.request.seed"
REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
"""The name cache writes had before the conventions renamed it (kept unless ``latest``)."""
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_write.input_tokens"
CONVERSATION_COMPACTED = "gen_ai.conversation.compacted"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
AGENT_NAME = "gen_ai.agent.name"
INPUT_MESSAGES_REF = "gen_ai.input.messages_ref"
OUTPUT_MESSAGES_REF = "gen_ai.output.messages_ref"
SYSTEM_INSTRUCTIONS_REF = "gen_ai.system_instructions_ref"
TOOL_DEFINITIONS_REF = "gen_ai.tool.definitions_ref"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
OPENINFERENCE_KIND = "openinference.span.kind"
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

_OPENINFERENCE_KINDS: Final = {
    "guardrail": "GUARDRAIL",
    "retrieval": "RETRIEVER",
    "retriever": "RETRIEVER",
    "embedding": "EMBEDDING",
    "embeddings": "EMBEDDING",
}
"""``openinference.span.kind`` of the other kinds; ``CHAIN`` for every kind not listed."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_INTERNAL, _CLIENT = SpanKind.INTERNAL, SpanKind.CLIENT
# Status values never change: one of each serves every span.
_UNSET_STATUS, _ERROR_STATUS = Status(StatusCode.UNSET), Status(StatusCode.ERROR)
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")


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


def _label(value: Any) -> str | None:
    """``_str(_plain(value))``, with the common cases (a string, nothing) first."""
    if type(value) is str:
        return value or None
    if value is None:
        return None
    return _str(_plain(value))


_Parts = tuple[Mapping[str, AttributeValue], int, int, int, int]
"""A span's attributes, start and end (ns), trace and span IDs, as the bridge built them."""
_Made = tuple[ReadableSpan, _Parts | None]
"""A span the bridge made and its parts (``None``: a host's span, handed on as it came)."""


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


class SpanBridge:
    """A Session observer that turns written Records into OpenTelemetry spans.

    Pass it to ``Session.create`` or ``Session.open`` (or ``add_observer``);
    it learns the session's file from the Session itself::

        with Session.create(path, observers=[SpanBridge()]) as session:
            ...

    Where the spans go, in this order:

    * ``processor`` given: to that ``SpanProcessor``, with ``resource``
      (default :func:`default_resource`);
    * ``tracer_provider`` given, or else the global one when the host has
      configured an SDK ``TracerProvider``: through that provider's span
      processors, exporters included, with its resource (``service.name``
      ...). The host's trace is joined by ``begin_run()``, which takes the
      active span as the run's parent;
    * neither: the embedded default, :func:`default_processor` for the
      session's file (``OTEL_EXPORTER_OTLP_*``, or an OTLP JSON file beside
      the session), which :meth:`shutdown` flushes and stops.

    Span and trace IDs are derived from the coordinates (see
    :func:`trace_id`, :func:`span_id`); a run begun inside a host span joins
    the host's trace and its root span's parent is the host span. Spans are
    always sampled: the session file is complete, so its spans are too, even
    below an unsampled host span.

    The bridge never raises into the recorder. A record it cannot handle is
    logged and counted in :attr:`failed_records`; a span the processor
    refuses is logged and counted in :attr:`dropped_spans`.

    One bridge serves the sessions it is attached to; attach it before
    ``begin_run``: records of a run whose ``run_start`` it did not see still
    make spans, but without the host trace.

    Args:
        processor: Receives each finished span through ``on_end``. It is
            called on the recording thread, so it must not block: use a
            ``BatchSpanProcessor`` outside tests.
        tracer_provider: An SDK ``TracerProvider`` whose processors and
            resource the spans use; default: the global one, if it is an SDK
            provider and no ``processor`` is given.
        resource: The spans' Resource with ``processor`` or the embedded
            default; default :func:`default_resource`. Not allowed with a
            tracer provider, whose resource is used.
        file_uri: How spans name the session file (a path or a URI, e.g. a
            shipped location); default: the attached Session's path. A bridge
            fed records by hand (not attached) needs it for ``loopscribe.file``
            and the ``gen_ai.*_ref`` attributes, which are left out otherwise.
        ref_base: Where references point instead of the local file, so they
            resolve on other machines: a store URL that ``loopscribe ship``
            writes to (``s3://bucket/prefix`` gives
            ``s3://bucket/prefix/sessions/<id>#seq=N``), or a URL template
            with ``{session_id}`` and ``{seq}`` (a team viewer:
            ``https://viewer.example/session/{session_id}/record/{seq}``).
            Default: the ``LOOPSCRIBE_REF_BASE`` environment variable, if set.
        metrics: Where the GenAI metrics of the spans go (``docs/metrics.md``):
            a ``MeterProvider``, a :class:`GenAIMetrics` or an
            ``EmbeddedMetrics``; ``False`` for
            none. Default: the host's global SDK MeterProvider if it has
            one, else, unless ``processor`` is given, the embedded default
            (:func:`default_meter_provider`: OTLP when an endpoint is
            configured, else ``FILE.metrics.otlp.jsonl`` beside the session).

    Raises:
        ValueError: ``processor`` and ``tracer_provider`` are both given, or
            ``resource`` is given with a tracer provider.
        TypeError: ``tracer_provider`` is not an SDK ``TracerProvider``.
    """

    def __init__(
        self,
        processor: SpanProcessor | None = None,
        *,
        tracer_provider: trace_api.TracerProvider | None = None,
        resource: Resource | None = None,
        file_uri: str | os.PathLike[str] | None = None,
        ref_base: str | None = None,
        metrics: GenAIMetrics | EmbeddedMetrics | metrics_api.MeterProvider | bool | None = None,
    ) -> None:
        if processor is not None and tracer_provider is not None:
            raise ValueError("give SpanBridge a processor or a tracer_provider, not both")
        provider = tracer_provider
        if processor is None and provider is None:
            configured = trace_api.get_tracer_provider()
            if isinstance(configured, TracerProvider):
                provider = configured
        self._limits = SpanLimits()
        self._owned: SpanProcessor | None = None
        self._processor: SpanProcessor | None = processor
        if provider is not None:
            if not isinstance(provider, TracerProvider):
                raise TypeError(
                    f"tracer_provider must be an opentelemetry.sdk.trace.TracerProvider, "
                    f"got {type(provider).__name__}: loopscribe hands finished spans to its "
                    "span processors"
                )
            if resource is not None:
                raise ValueError(
                    "a bridge bound to a TracerProvider uses the provider's resource; "
                    "configure the resource there instead of passing resource="
                )
            self._processor = _provider_processor(provider)
            self._resource = hashed(provider.resource)
            limits = getattr(provider, "_span_limits", None)
            if isinstance(limits, SpanLimits):
                self._limits = limits
        else:
            self._resource = hashed(default_resource() if resource is None else resource)
        self.tracer_provider = provider
        """The host's TracerProvider the bridge is bound to, or ``None``."""
        self._file = None if file_uri is None else to_file_uri(file_uri)
        self._ref_base = (ref_base or os.environ.get(REF_BASE_ENV) or "").rstrip("/") or None
        self._viewer = self._ref_base is not None and "{" in self._ref_base
        """References are viewer URLs (a template), which do not name the file."""
        self._files: dict[str, str] = {}
        self._scope = scope()
        self._runs: dict[tuple[str, str], _Run] = {}
        self._lock = threading.Lock()
        self.spans_emitted = 0
        """Spans handed to the processor."""
        self.dropped_spans = 0
        """Spans the processor raised on (each was logged)."""
        self.failed_records = 0
        """Records the bridge could not handle (each was logged)."""
        self._legacy_cache = semconv_mode() != "latest"
        self._compacted: set[str] = set()
        """Sessions whose next model call is the first after a compaction."""
        self._metrics_default = False
        self.metrics: GenAIMetrics | EmbeddedMetrics | None = None
        """What records the spans' GenAI metrics, or ``None``."""
        if isinstance(metrics, GenAIMetrics) or type(metrics).__name__ == "EmbeddedMetrics":
            self.metrics = metrics  # type: ignore[assignment]
        elif isinstance(metrics, metrics_api.MeterProvider):
            self.metrics = GenAIMetrics(metrics)
        elif metrics is not False:
            host = host_meter_provider()
            if host is not None:
                self.metrics = GenAIMetrics(host)
            else:
                # Made with the embedded default, when the session's file is known.
                self._metrics_default = metrics is True or processor is None

    @property
    def file(self) -> str | None:
        """The URI spans give the session file: ``file_uri``, or the attached session's."""
        if self._file is not None:
            return self._file
        with self._lock:
            return next(iter(self._files.values()), None)

    @property
    def processor(self) -> SpanProcessor | None:
        """Where spans go: the given processor, the provider's, or the embedded default.

        ``None`` until the embedded default is created, when the bridge is
        attached to its first Session.
        """
        return self._processor

    def bind_session(self, session: SessionLike) -> None:
        """Learn a Session's ID and file; the Session calls it when the bridge is attached."""
        uri = to_file_uri(session.path)
        with self._lock:
            self._files[session.id] = uri
            if self._processor is None:
                from ._export import default_processor

                self._owned = self._processor = default_processor(session.path)
            if self._metrics_default and self.metrics is None:
                from ._metrics_export import EmbeddedMetrics

                self.metrics = EmbeddedMetrics(session.path, resource=self._resource)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what the processor holds; with a host provider, its processors flush."""
        processor = self._processor
        flushed = True if processor is None else processor.force_flush(timeout_millis)
        if self.metrics is not None:
            flushed = self.metrics.force_flush(timeout_millis) and flushed
        return flushed

    def shutdown(self) -> None:
        """Flush and stop the embedded defaults (spans, metrics); a host's are left to it."""
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.shutdown()
        if self.metrics is not None:
            self.metrics.shutdown()

    def _location(self, run: _Run) -> str | None:
        """``loopscribe.file``: the shipped location with a store ``ref_base``, else the file."""
        if run.location is not None:
            return run.location
        base = self._ref_base
        if base is not None and "{" not in base:
            location: str | None = f"{base}/sessions/{run.session_id}"
        else:
            location = self._file_of(run)
        run.location = location  # kept once known: the run's spans all name one file
        return location

    def _refs(self, run: _Run) -> Callable[[int], str | None]:
        """References to a run's records, by seq: in the store, in a viewer, or in the file."""
        if run.refs is not None:
            return run.refs
        base = self._ref_base
        if base is not None and "{" in base:
            refs: Callable[[int], str | None] = lambda seq: base.format(  # noqa: E731
                session_id=run.session_id, seq=seq
            )
        else:
            location = self._location(run)
            if location is None:
                return lambda seq: None  # not known yet: the session may be bound later
            prefix = f"{location}#seq="
            refs = lambda seq: f"{prefix}{seq}"  # noqa: E731
        run.refs = refs
        return refs

    def __call__(self, record: Record) -> None:
        """Observe one written Record; end the spans it completes."""
        try:
            with self._lock:
                spans = self._observe(record)
                processor = self._processor
                if spans and processor is not None:
                    # Counted as handed on now; a span the processor refuses is taken back.
                    self.spans_emitted += len(spans)
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
        if processor is None:
            if spans:
                with self._lock:
                    self.dropped_spans += len(spans)
                logger.warning(
                    "loopscribe span bridge has nowhere to send %d spans: attach it to a "
                    "Session or give it a processor or tracer_provider",
                    len(spans),
                )
            return
        if not spans:
            return
        on_end = processor.on_end
        for span, _parts in spans:
            try:
                on_end(span)
            except Exception:
                with self._lock:
                    self.dropped_spans += 1
                    self.spans_emitted -= 1
                logger.exception("span processor %r failed on span %r", self._processor, span.name)
        metrics = self.metrics
        if metrics is not None:
            for span, parts in spans:
                if parts is None:
                    metrics.record(span)  # a host's span, as it was handed on
                else:
                    metrics.measure(*parts)  # the bridge's own: read nothing back

    # -- state machine -------------------------------------------------------

    def _observe(self, record: Record) -> list[_Made]:
        if record.type == ev.COMPACTION:
            self._compacted.add(record.session_id)
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
            if record.type == ev.RUN_RESUME:
                # A bridge that joins at a resume (the resuming process) rebuilds the
                # run from the run_start the record repeats, as replay sees it.
                _resume_from(run, record.data.get("run_start"))
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
        fold = run.fold
        if (execution.id, execution.attempt) not in fold.open and host_span_id(
            execution.id
        ) is not None:
            # A span the host's instrumentation made: emitted as it was handed on.
            run.host = True
            return [(span_from_record_data(record.data), None)] if record.type == HOST_SPAN else []
        attempt, step = fold.feed(record, execution)
        if attempt is None or step == LATE:
            # A late record for a finished attempt (retry_scheduled, message_end).
            return []
        _update(run, attempt, record)
        if step != ENDED:
            return []
        return [self._attempt_span(run, attempt, _ns(record.ts), incomplete=False)]

    def _new_run(self, record: Record, host: SpanContext | None) -> _Run:
        session_id, run_id = record.session_id, record.run_id or ""
        tid = trace_id(session_id, run_id) if host is None else host.trace_id
        own = SpanContext(tid, run_span_id(session_id, run_id), False, _SAMPLED)
        run = _Run(session_id, run_id, tid, own, host, _ns(record.ts), record.seq)

        def start(record: Record, execution: Execution, parent: Key | None) -> _Attempt:
            return self._new_attempt(run, record, execution, parent)

        run.fold = AttemptFold(start)
        return run

    def _new_attempt(
        self, run: _Run, record: Record, execution: Execution, parent: Key | None
    ) -> _Attempt:
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
        attempt.parent = _parent_span(run, execution, parent)
        running = None if parent is None else run.fold.open.get(parent)
        if running is not None:
            attempt.conversation = running.conversation
        if execution.kind == "model" and record.session_id in self._compacted:
            self._compacted.discard(record.session_id)
            attempt.compacted = True
        return attempt

    def _close_run(self, run: _Run, record: Record) -> list[_Made]:
        end_ns = _ns(record.ts)
        # seq.last always names the record that ended the span, here run_close:
        # an exporter resuming from a seq cursor must not skip this span.
        still_open = run.fold.close(record.seq)
        spans = []
        for attempt in reversed(still_open):  # newest first: nested work ends before its parent
            spans.append(self._attempt_span(run, attempt, end_ns, incomplete=True))
        if not run.host:
            spans.append(self._run_span(run, record, end_ns))
        return spans

    # -- span construction -------------------------------------------------------

    def _file_of(self, run: _Run) -> str | None:
        if self._file is not None:
            return self._file
        return self._files.get(run.session_id)

    @staticmethod
    def _common(run: _Run, operation: str | None) -> dict[str, AttributeValue]:
        attrs: dict[str, AttributeValue] = {} if operation is None else {OPERATION_NAME: operation}
        attrs[CONVERSATION_ID] = run.session_id
        attrs[SESSION_ID] = run.session_id
        attrs[LS_RUN_ID] = run.run_id
        return attrs

    def _run_span(self, run: _Run, record: Record, end_ns: int) -> _Made:
        attrs = self._common(run, "invoke_agent")
        agent, error = run.fold.agent, run.fold.error_type
        _put(attrs, AGENT_NAME, agent)
        _put(attrs, PROVIDER_NAME, run.provider)
        _put(attrs, REQUEST_MODEL, run.model)
        attrs[LS_SEQ_FIRST] = run.seq_first
        attrs[LS_SEQ_LAST] = record.seq
        _put(attrs, LS_FILE, self._location(run))
        _put(attrs, ERROR_TYPE, error)
        if run.resumed_at:
            attrs["loopscribe.run.resumed_at_seq"] = tuple(run.resumed_at)
        name = f"invoke_agent {agent}" if agent else "invoke_agent"
        return self._span(name, run.span, run.host_parent, attrs, run.start_ns, end_ns, error)

    def _attempt_span(
        self, run: _Run, attempt: _Attempt, end_ns: int, *, incomplete: bool
    ) -> _Made:
        ex = attempt.execution
        parent = attempt.parent
        if parent is None:  # its parent had not appeared when it started: as things stand now
            parent = _parent_span(run, ex, run.fold.parent(ex)) or run.span
        operation = _OPERATIONS.get(ex.kind)
        attrs = self._common(run, operation)
        file = self._location(run)
        kind = _INTERNAL
        if ex.kind == "model":
            kind = _CLIENT
            name = _model_attrs(attrs, attempt, self._refs(run), self._legacy_cache)
            refs = INPUT_MESSAGES_REF in attrs or OUTPUT_MESSAGES_REF in attrs
            if refs and not self._viewer:
                file = None  # the references name it already
        elif ex.kind == "tool":
            name = span_name("tool", model=None, tool=attempt.tool, agent=None, node=None)
            if attempt.tool is not None:
                attrs[TOOL_NAME] = attempt.tool
            attrs[TOOL_CALL_ID] = ex.id
            if attempt.tool_type is not None:
                attrs[TOOL_TYPE] = attempt.tool_type
            if attempt.tool_description is not None:
                attrs[TOOL_DESCRIPTION] = attempt.tool_description
            if attempt.mcp:
                attrs.update(attempt.mcp)
        elif ex.kind == "agent":
            name = span_name("agent", model=None, tool=None, agent=attempt.agent, node=None)
            if attempt.agent is not None:
                attrs[AGENT_NAME] = attempt.agent
            if attempt.provider is not None:
                attrs[PROVIDER_NAME] = attempt.provider
            if attempt.request_model is not None:
                attrs[REQUEST_MODEL] = attempt.request_model
        else:
            # Not a GenAI operation: a low-cardinality name and a type backends show.
            name = span_name(ex.kind, model=None, tool=None, agent=None, node=attempt.name)
            attrs[OPENINFERENCE_KIND] = _OPENINFERENCE_KINDS.get(ex.kind, "CHAIN")
        attrs[LS_EXECUTION_ID] = ex.id
        attrs[LS_EXECUTION_KIND] = ex.kind
        if ex.parent_id is not None:
            attrs[LS_PARENT_ID] = ex.parent_id
        attrs[LS_ATTEMPT] = ex.attempt
        attrs[LS_SEQ_FIRST] = attempt.seq_first
        attrs[LS_SEQ_LAST] = attempt.seq_last
        if file is not None:
            attrs[LS_FILE] = file
        if attempt.source_file is not None:
            attrs[LS_SOURCE_FILE] = attempt.source_file
        if attempt.source_line is not None:
            attrs[LS_SOURCE_LINE] = attempt.source_line
        if incomplete:
            attrs[LS_INCOMPLETE] = True
        if attempt.error_type is not None:
            attrs[ERROR_TYPE] = attempt.error_type
        if attempt.conversation is not None:
            # The sub-agent's own conversation; session.id stays the session's.
            attrs[CONVERSATION_ID] = attempt.conversation
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
        kind: SpanKind = _INTERNAL,
    ) -> _Made:
        # ReadableSpan skips the SDK's span limits; apply them here.
        # Every value is a str, int, float, bool or tuple of str the bridge
        # built itself, so the SDK's type cleaning has nothing to do; only limits can.
        limits = self._limits
        most = limits.max_span_attributes
        if limits.max_span_attribute_length is None and (most is None or len(attrs) <= most):
            bounded: Mapping[str, AttributeValue] = attrs
        else:
            bounded = BoundedAttributes(
                limits.max_span_attributes,
                attrs,
                immutable=True,
                max_value_len=limits.max_span_attribute_length,
            )
        # A description could only come from an error message; never set one.
        status = _ERROR_STATUS if error_type else _UNSET_STATUS
        end_ns = max(start_ns, end_ns)
        span = ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=bounded,
            kind=kind,
            status=status,
            start_time=start_ns,
            # Source clocks can disagree; a span never ends before it starts.
            end_time=end_ns,
            instrumentation_scope=self._scope,
        )
        return span, (bounded, start_ns, end_ns, context.trace_id, context.span_id)


class SessionLike(Protocol):
    """What :meth:`SpanBridge.bind_session` reads of a Session."""

    @property
    def id(self) -> str: ...

    @property
    def path(self) -> Path: ...


def _provider_processor(provider: TracerProvider) -> SpanProcessor:
    """The span processor an SDK TracerProvider hands its finished spans to."""
    processor = getattr(provider, "_active_span_processor", None)
    if not isinstance(processor, SpanProcessor):  # pragma: no cover - an SDK without it
        raise TypeError(
            f"this opentelemetry-sdk's TracerProvider ({type(provider).__name__}) exposes no "
            "span processor; pass SpanBridge(processor=...) instead"
        )
    return processor


def _model_attrs(
    attrs: dict[str, AttributeValue],
    attempt: _Attempt,
    ref: Callable[[int], str | None],
    legacy_cache: bool = True,
) -> str:
    """The chat span's GenAI attributes, ``ref(seq)`` naming a record; returns the span name.

    Written out rather than through :func:`_put`: this runs for every model call.
    ``legacy_cache`` also writes cache writes under their former name.
    """
    value: str | int | float | None
    model = attempt.request_model or attempt.response_model
    # Every inference span names a provider: the conventions' "other" when none is known.
    attrs[PROVIDER_NAME] = attempt.provider or OTHER_PROVIDER
    if attempt.compacted:
        attrs[CONVERSATION_COMPACTED] = True
    if (value := attempt.request_model) is not None:
        attrs[REQUEST_MODEL] = value
    if (value := attempt.response_model) is not None:
        attrs[RESPONSE_MODEL] = value
    if (value := attempt.response_id) is not None:
        attrs[RESPONSE_ID] = value
    first, sent = attempt.first_chunk_ns, attempt.request_ns
    if first is not None and sent is not None and attempt.stream is not False:
        attrs[TIME_TO_FIRST_CHUNK] = max(0, first - sent) / 1e9
    if attempt.stream is not None:
        attrs[REQUEST_STREAM] = attempt.stream
    if (address := attempt.server_address) is not None:
        attrs[SERVER_ADDRESS] = address
        if (value := attempt.server_port) is not None:
            attrs[SERVER_PORT] = value
    params = attempt.params
    if params is not None:
        if (value := params.temperature) is not None:
            attrs[REQUEST_TEMPERATURE] = value
        if (value := params.max_tokens) is not None:
            attrs[REQUEST_MAX_TOKENS] = value
        if (value := params.top_p) is not None:
            attrs[REQUEST_TOP_P] = value
        if (value := params.top_k) is not None:
            attrs[REQUEST_TOP_K] = value
        if (value := params.frequency_penalty) is not None:
            attrs[REQUEST_FREQUENCY_PENALTY] = value
        if (value := params.presence_penalty) is not None:
            attrs[REQUEST_PRESENCE_PENALTY] = value
        if params.stop_sequences:
            attrs[REQUEST_STOP_SEQUENCES] = params.stop_sequences
        if (value := params.seed) is not None:
            attrs[REQUEST_SEED] = value
        if params.choice_count is not None and params.choice_count != 1:
            attrs[REQUEST_CHOICE_COUNT] = params.choice_count
    usage = attempt.usage
    if usage is not None:
        if (value := usage.input_tokens) is not None:
            attrs[INPUT_TOKENS] = value
        if (value := usage.output_tokens) is not None:
            attrs[OUTPUT_TOKENS] = value
        # Zero counts of these are left out: most providers report 0 for "none".
        if usage.cache_read:
            attrs[CACHE_READ_TOKENS] = usage.cache_read
        if usage.cache_creation:
            attrs[CACHE_WRITE_TOKENS] = usage.cache_creation
            if legacy_cache:
                attrs[CACHE_CREATION_TOKENS] = usage.cache_creation
        if usage.reasoning:
            attrs[REASONING_TOKENS] = usage.reasoning
    if attempt.finish_reasons:
        attrs[FINISH_REASONS] = attempt.finish_reasons
    request = None if attempt.request_seq is None else ref(attempt.request_seq)
    if request is not None:
        attrs[INPUT_MESSAGES_REF] = request
        if attempt.has_system:
            attrs[SYSTEM_INSTRUCTIONS_REF] = request
        if attempt.has_tools:
            attrs[TOOL_DEFINITIONS_REF] = request
    response = None if attempt.response_seq is None else ref(attempt.response_seq)
    if response is not None:
        attrs[OUTPUT_MESSAGES_REF] = response
    return span_name("model", model=model, tool=None, agent=None, node=None)


def _put(attrs: dict[str, AttributeValue], key: str, value: str | int | float | None) -> None:
    if value is not None:
        attrs[key] = value


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


def replay(
    path: str | os.PathLike[str],
    processor: SpanProcessor | None = None,
    *,
    tracer_provider: trace_api.TracerProvider | None = None,
    resource: Resource | None = None,
    file_uri: str | os.PathLike[str] | None = None,
    ref_base: str | None = None,
    metrics: GenAIMetrics | metrics_api.MeterProvider | bool | None = None,
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
        tracer_provider: Instead of ``processor``: a host's SDK TracerProvider
            (its processors and resource), as for :class:`SpanBridge`. With
            neither, the global SDK provider if one is configured.
        resource: The spans' Resource with ``processor``; default :func:`default_resource`.
        file_uri: How spans name the file; default ``path`` as a ``file://`` URI,
            which is what a live bridge attached to the Session used.
        ref_base: As for :class:`SpanBridge`.
        metrics: As for :class:`SpanBridge`; the measurements are recorded now
            (for the recorded times, see :func:`export_metrics`).

    Returns:
        The number of spans handed to the processor.

    Raises:
        ValueError: Neither a processor nor a configured TracerProvider is there.
        CorruptRecordError: A complete line of the file is damaged.
        UnsupportedVersionError: The file's format version is not supported.
        OSError: The file cannot be read.
    """
    bridge = SpanBridge(
        processor,
        tracer_provider=tracer_provider,
        resource=resource,
        file_uri=path if file_uri is None else file_uri,
        ref_base=ref_base,
        metrics=metrics,
    )
    if bridge.processor is None:
        raise ValueError(
            "replay needs somewhere to send spans: pass a processor or a tracer_provider "
            "(or configure a global SDK TracerProvider)"
        )
    for record in read(path, decode=False):
        bridge(record)
    return bridge.spans_emitted

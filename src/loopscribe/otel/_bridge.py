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

import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from .. import events as ev
from .._attempts import ENDED, LATE, AttemptFold, Key
from .._fields import (
    span_name,
)
from .._model import Execution, Record
from ._attributes import (
    AGENT_NAME,
    CONVERSATION_ID,
    ERROR_TYPE,
    INPUT_MESSAGES_REF,
    LS_ATTEMPT,
    LS_EXECUTION_ID,
    LS_EXECUTION_KIND,
    LS_FILE,
    LS_INCOMPLETE,
    LS_PARENT_ID,
    LS_RUN_ID,
    LS_SEQ_FIRST,
    LS_SEQ_LAST,
    LS_SOURCE_FILE,
    LS_SOURCE_LINE,
    OPENINFERENCE_KIND,
    OPERATION_NAME,
    OUTPUT_MESSAGES_REF,
    PROVIDER_NAME,
    REQUEST_MODEL,
    SESSION_ID,
    TOOL_CALL_ID,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_TYPE,
    _model_attrs,
    _put,
)
from ._host import HOST_SPAN, span_from_record_data
from ._ids import host_span_id, parse_traceparent, run_span_id, span_id, trace_id
from ._metrics import GenAIMetrics, host_meter_provider, semconv_mode
from ._resource import default_resource, hashed, scope
from ._run_state import (
    _OPERATIONS,
    _SAMPLED,
    _Attempt,
    _ns,
    _parent_span,
    _resume_from,
    _Run,
    _update,
)

if TYPE_CHECKING:
    from ._metrics_export import EmbeddedMetrics

logger = logging.getLogger("loopscribe.otel")

REF_BASE_ENV = "LOOPSCRIBE_REF_BASE"
"""Environment variable: the default ``ref_base`` of every SpanBridge."""


_OPENINFERENCE_KINDS: Final = {
    "guardrail": "GUARDRAIL",
    "retrieval": "RETRIEVER",
    "retriever": "RETRIEVER",
    "embedding": "EMBEDDING",
    "embeddings": "EMBEDDING",
}
"""``openinference.span.kind`` of the other kinds; ``CHAIN`` for every kind not listed."""

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


_Parts = tuple[Mapping[str, AttributeValue], int, int, int, int]
"""A span's attributes, start and end (ns), trace and span IDs, as the bridge built them."""
_Made = tuple[ReadableSpan, _Parts | None]
"""A span the bridge made and its parts (``None``: a host's span, handed on as it came)."""


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

"""OffloadingProcessor: the host's spans in, their bodies into a session file, the rest on.

A standard ``SpanProcessor`` put in front of the host's own (for example
``BatchSpanProcessor(OTLPSpanExporter())``). Every ended span goes through
one cheap test (:func:`~._records.carries_content`); a span without a body
is handed on as it is. A span with one is read by each convention's module,
its operation recorded (``_book``), and a copy handed on: the same IDs,
parent, links, times, status, kind, resource and scope, every attribute and
event that carried no body unchanged, the ones that did removed, and
references to the records added.

The GenAI metrics of the spans whose instrumentation records none
(OpenInference's) are recorded on the way (``_metrics``), so that a chart
of token usage or latency covers every host without counting a call twice.

Nothing raises into the host: a body that cannot be read is kept as it came
and counted in :attr:`OffloadingProcessor.problems`; a record that cannot be
written is counted in :attr:`OffloadingProcessor.failed` and the span still
goes on, without its bodies (never with a body that is in no file).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import metrics as metrics_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanContext, StatusCode

from .._errors import LoopscribeError
from .._hostkit import LOGGER, Guard
from .._redact import LineRedactor
from ..otel import GenAIMetrics, host_meter_provider, span_record_data
from ._book import Book, SpanRef, book_for
from ._found import Found
from ._metrics import measured_by_default, measured_span
from ._records import carries_content, collect, exception_error, kind_of, labels, plan

if TYPE_CHECKING:
    from ..otel import EmbeddedMetrics

logger = logging.getLogger(LOGGER)

METRICS_STEM: Final = "intake"
"""The embedded default writes the folder's metrics to ``intake.metrics.otlp.jsonl`` in it."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
CONVERSATION_KEYS: Final = ("session.id", "gen_ai.conversation.id")


def to_datetime(ns: int | None) -> datetime:
    """A span time (ns since the epoch) as a UTC datetime; ``None`` is now."""
    if ns is None:
        return datetime.now(UTC)
    return _EPOCH + timedelta(microseconds=ns // 1000)


def conversation_of(attributes: Mapping[str, Any] | None) -> str | None:
    """The conversation a span names: ``session.id``, else ``gen_ai.conversation.id``."""
    if not attributes:
        return None
    for key in CONVERSATION_KEYS:
        value = attributes.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def span_ref(ctx: SpanContext, parent: SpanContext | None, start_ns: int | None) -> SpanRef:
    """The bookkeeping's view of a span."""
    local = parent is not None and not parent.is_remote and parent.trace_id == ctx.trace_id
    return SpanRef(
        trace_id=ctx.trace_id,
        span_id=ctx.span_id,
        parent_span_id=parent.span_id if local and parent is not None else None,
        remote_parent_id=parent.span_id if parent is not None and not local else None,
        trace_flags=int(ctx.trace_flags),
        start=to_datetime(start_ns),
    )


def is_local_root(span: ReadableSpan) -> bool:
    """Whether a span is the first of its trace in this process."""
    parent = span.parent
    return parent is None or parent.is_remote


def handed_on(
    span: ReadableSpan, attributes: Mapping[str, Any], events: Sequence[Event]
) -> ReadableSpan:
    """A copy of ``span`` with these attributes and events, everything else the same.

    What the SDK's limits dropped stays counted, so the exported span says so.
    """
    attrs: Mapping[str, Any] = dict(attributes)
    if span.dropped_attributes:
        bounded = BoundedAttributes(None, attrs, immutable=True)
        bounded.dropped = span.dropped_attributes
        attrs = bounded
    kept_events: Sequence[Event] = tuple(events)
    if span.dropped_events:
        kept_events = BoundedList.from_seq(None, kept_events)
        kept_events.dropped = span.dropped_events
    links: Sequence[Any] = span.links
    if span.dropped_links:
        links = BoundedList.from_seq(None, links)
        links.dropped = span.dropped_links
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attrs,
        events=kept_events,
        links=links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class OffloadingProcessor(SpanProcessor):
    """Records the bodies of GenAI spans into session files; hands the spans on without them.

    Put it in front of the processor that exports your spans; a span
    carrying no body passes through untouched::

        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from loopscribe.otel import OffloadingProcessor

        provider.add_span_processor(
            OffloadingProcessor(BatchSpanProcessor(OTLPSpanExporter()), "sessions")
        )

    It reads the OpenTelemetry GenAI conventions (official instrumentations,
    pydantic-ai, current OpenLLMetry), OpenInference and OpenLLMetry's
    indexed attributes; see ``loopscribe.intake`` for the mapping to
    sessions, runs and executions.

    Args:
        downstream: Receives every span, bodies removed.
        directory: The sessions folder (created if missing).
        redact: Scrubs secrets from every record line (see
            :class:`loopscribe.Redactor`); the first processor, log processor
            or hook of a folder sets it for all of them.
        metrics: Record the GenAI metrics (token usage, operation duration,
            time to first chunk, tool and agent durations) of the spans
            taken in. ``None`` (the default): only for spans whose
            instrumentation records none itself (OpenInference's), so that
            nothing is counted twice; ``True``: for every GenAI span;
            ``False``: none.
        meter_provider: Where the metrics go. Default: the host's global SDK
            ``MeterProvider`` if it has one when the first span is measured,
            else the embedded default (OTLP when an endpoint is configured,
            else ``intake.metrics.otlp.jsonl`` in ``directory``).
    """

    def __init__(
        self,
        downstream: SpanProcessor,
        directory: str | os.PathLike[str],
        *,
        redact: LineRedactor | None = None,
        metrics: bool | None = None,
        meter_provider: metrics_api.MeterProvider | None = None,
    ) -> None:
        self.downstream = downstream
        self.book: Book = book_for(directory, redact=redact)
        self.metrics_mode = metrics
        """``None`` (spans of conventions that record no metrics), ``True`` or ``False``."""
        self.metrics: GenAIMetrics | EmbeddedMetrics | None = None
        """What records the spans' GenAI metrics; made when the first span is measured."""
        self._meter_provider = meter_provider
        self._metrics_lock = threading.Lock()
        self.metrics_errors = 0
        """Spans whose metrics could not be recorded (each logged)."""
        self.recorded = 0
        """Spans whose operation was recorded."""
        self.failed = 0
        """Spans whose records could not be written (each logged); they went on without bodies."""
        self.problems = 0
        """Spans with a body not as its convention says (each logged; kept as it came)."""
        self.downstream_errors = 0
        """Times the downstream processor raised (each logged)."""
        self.guard = Guard("OffloadingProcessor")
        """The never-raise policy: unexpected failures counted, the first logged at ERROR."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """A local root span that names a conversation names it for its whole trace."""
        if is_local_root(span):
            conversation = conversation_of(span.attributes)
            if conversation is not None:
                self.book.bind(span.context.trace_id, conversation)
        self.downstream.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        ending = getattr(self.downstream, "_on_ending", None)
        if callable(ending):
            ending(span)

    def on_end(self, span: ReadableSpan) -> None:
        """Measure the span, record its bodies, then hand it on without them (never raises)."""
        if self.metrics_mode is not False:
            self._measure(span)
        try:
            handed = self._offload(span)
        except Exception:
            self.failed += 1
            self.guard.failed(f"recording span {span.name!r}")
            handed = handed_on(span, *_without_bodies(span))
        try:
            self.downstream.on_end(handed)
        except Exception:
            self.downstream_errors += 1
            logger.exception("span processor %r failed on span %r", self.downstream, span.name)

    def _measure(self, span: ReadableSpan) -> None:
        try:
            if self.metrics_mode is None and not measured_by_default(span.attributes or {}):
                return
            found = measured_span(span)
            if found is None:
                return
            sink = self.metrics or self._sink(span)
            sink.record(found)
        except Exception:
            self.metrics_errors += 1
            self.guard.failed(f"measuring span {span.name!r}")

    def _sink(self, span: ReadableSpan) -> GenAIMetrics | EmbeddedMetrics:
        """The host's MeterProvider, else the embedded default; made once."""
        with self._metrics_lock:
            if self.metrics is None:
                provider = self._meter_provider or host_meter_provider()
                if provider is not None:
                    self.metrics = GenAIMetrics(provider)
                else:
                    from ..otel import EmbeddedMetrics

                    path = Path(self.book.directory) / METRICS_STEM
                    self.metrics = EmbeddedMetrics(path, resource=span.resource)
            return self.metrics

    def _offload(self, span: ReadableSpan) -> ReadableSpan:
        ctx = span.context
        attributes = span.attributes or {}
        events = span.events
        if ctx is None:
            return span
        if not carries_content(attributes, events):
            book = self.book
            handed = self._pending(span, attributes, events) if book.pending else span
            if book.tracing and is_local_root(span) and book.has_open_run(ctx.trace_id):
                book.end_trace(ctx.trace_id, to_datetime(span.end_time))
            return handed
        # One plain dict for every lookup: a miss on the SDK's mapping raises and catches.
        attributes = dict(attributes)
        found = collect(attributes, events)
        kept = {k: v for k, v in attributes.items() if k not in found.keys}
        kept_events = [e for i, e in enumerate(events) if i not in found.events]
        refs = self._record(span, attributes, found, kept, kept_events)
        if refs:
            kept.update(refs)
        if is_local_root(span):
            self.book.end_trace(ctx.trace_id, to_datetime(span.end_time))
        return handed_on(span, kept, kept_events)

    def _record(
        self,
        span: ReadableSpan,
        attributes: Mapping[str, Any],
        found: Found,
        kept: dict[str, Any],
        kept_events: list[Event],
    ) -> Mapping[str, str | int]:
        """Write the span's records; the references to them, or none if writing failed."""
        ctx = span.context
        assert ctx is not None
        if found.problems:
            self.problems += 1
            logger.warning(
                "loopscribe intake: span %r (%016x): %s",
                span.name,
                ctx.span_id,
                "; ".join(found.problems),
            )
        status = span.status
        failed = status.status_code is StatusCode.ERROR
        lab = labels(attributes, error=failed, description=status.description)
        if failed and "error.type" not in attributes:
            lab.error = exception_error(span.events) or lab.error
        start, end = to_datetime(span.start_time), to_datetime(span.end_time)
        try:
            written = self.book.record(
                span_ref(ctx, span.parent, span.start_time),
                conversation_of(attributes),
                kind_of(found),
                span.end_time,
                lambda execution: plan(found, lab, execution, span.name, start, end),
                lambda refs: span_record_data(span, {**kept, **refs}, kept_events),
                end,
            )
        except (LoopscribeError, OSError) as exc:
            self.failed += 1
            logger.warning(
                "loopscribe intake could not record span %r (%016x) in %s: %s; "
                "it goes on without its bodies",
                span.name,
                ctx.span_id,
                self.book.directory,
                exc,
            )
            return {}
        if not written.duplicate:
            self.recorded += 1
        return written.refs

    def _pending(
        self, span: ReadableSpan, attributes: Mapping[str, Any], events: Sequence[Event]
    ) -> ReadableSpan:
        """A span a hook or log processor recorded: its ``host_span`` record, references added."""
        ctx = span.context
        pending = None if ctx is None else self.book.take_pending(ctx.span_id)
        if pending is None:
            return span
        added = {k: v for k, v in pending.refs.items() if attributes.get(k) != v}
        handed = handed_on(span, {**attributes, **added}, events) if added else span
        try:
            self.book.record_span(pending, span_record_data(handed), to_datetime(span.end_time))
        except (LoopscribeError, OSError) as exc:
            self.failed += 1
            logger.warning("loopscribe intake could not record span %r: %s", span.name, exc)
        return handed

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Sync the session files, then flush the downstream processor."""
        try:
            self.book.flush()
        except Exception:
            self.guard.failed(f"syncing {self.book.directory}")
        flushed = True
        if self.metrics is not None:
            try:
                flushed = self.metrics.force_flush(timeout_millis)
            except Exception:
                self.guard.failed("flushing its metrics")
                flushed = False
        return self.downstream.force_flush(timeout_millis) and flushed

    def shutdown(self) -> None:
        """Close the session files, then shut the downstream processor down."""
        try:
            self.book.close()
        except Exception:
            self.guard.failed(f"closing {self.book.directory}")
        if self.metrics is not None:
            with self.guard.contained("stopping its metrics"):
                self.metrics.shutdown()
        self.downstream.shutdown()


def _without_bodies(span: ReadableSpan) -> tuple[dict[str, Any], list[Event]]:
    """The span's attributes and events without anything a convention holds a body in.

    The fallback when reading the span failed: by the conventions' own keys,
    not by what their readers found.
    """
    from ._records import is_content_key

    attributes = {k: v for k, v in (span.attributes or {}).items() if not is_content_key(k)}
    events = [e for e in span.events if not is_content_key(e.name, event=True)]
    return attributes, events

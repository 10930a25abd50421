"""The ``loopscribe`` completion hook: util-genai's instrumentations write their content here.

``opentelemetry-util-genai`` loads a completion hook from the entry point
group ``opentelemetry_genai_completion_hook`` by the name in
``OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK``; loopscribe registers
:class:`LoopscribeCompletionHook` as ``loopscribe``. Every instrumentation
built on util-genai then hands it, when an operation finishes, the
operation's input and output messages, system instructions and tool
definitions, with the span still open: it records them into a session under
``LOOPSCRIBE_DIR`` and stamps the references on the span (and on the
operation's log record, whose bodies it removes). Content capture stays off,
so no body enters a span.

When the span ends, its ``host_span`` record is written too, so replay
gives the span the host exported: the hook joins the span's processor
chain, last, with a processor that writes it (and closes a trace's run
when its local root span ends).
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from .._errors import LoopscribeError
from .._home import HOME_ENV, sessions_home
from .._hostkit import LOGGER, Guard
from .._redact import LineRedactor
from ..otel import span_record_data
from ._book import Book, SpanRef, book_for
from ._otel_genai import CONTENT_KEYS, OPERATION_KINDS, from_hook
from ._processor import conversation_of, is_local_root, span_ref, to_datetime
from ._records import exception_error, kind_of, labels, plan

logger = logging.getLogger(LOGGER)

DIR_ENV: Final = HOME_ENV
"""Environment variable: the sessions folder of the completion hook (the sessions home)."""
DEFAULT_DIR: Final = "loopscribe-sessions"
"""Kept for one release: the hook's folder is now :func:`loopscribe.sessions_home`."""


class _SpanEnds(SpanProcessor):
    """Joins a host's processor chain, last: writes the hook's spans' ``host_span`` records."""

    def __init__(self, book: Book, guard: Guard) -> None:
        self._book = book
        self._guard = guard

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None:
            return
        try:
            pending = self._book.take_pending(ctx.span_id)
            if pending is not None:
                self._book.record_span(pending, span_record_data(span), to_datetime(span.end_time))
            if is_local_root(span) and self._book.has_open_run(ctx.trace_id):
                self._book.end_trace(ctx.trace_id, to_datetime(span.end_time))
        except Exception:
            self._guard.failed(f"recording the end of span {span.name!r}")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._book.flush()
        return True

    def shutdown(self) -> None:
        self._book.close()


class LoopscribeCompletionHook:
    """A util-genai ``CompletionHook`` that records content into loopscribe sessions.

    Enable it for every util-genai instrumentation with
    ``OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=loopscribe`` (content
    capture left off), or pass it to one: ``Instrumentor().instrument(
    completion_hook=LoopscribeCompletionHook("sessions"))``.

    Args:
        directory: The sessions folder; default the sessions home
            (:func:`loopscribe.sessions_home`: ``LOOPSCRIBE_DIR``, else
            ``$XDG_DATA_HOME/loopscribe``), which the command line reads too.
        redact: As for :class:`~loopscribe.otel.OffloadingProcessor`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        redact: LineRedactor | None = None,
    ) -> None:
        if directory is None:
            directory = sessions_home()
        self.book: Book = book_for(directory, redact=redact)
        self.guard = Guard("completion hook")
        """The never-raise policy: unexpected failures counted, the first logged at ERROR."""
        self._ends = _SpanEnds(self.book, self.guard)
        self._joined: weakref.WeakSet[Any] = weakref.WeakSet()
        self.recorded = 0
        """Operations recorded."""
        self.failed = 0
        """Operations that could not be recorded (each logged)."""

    def on_completion(
        self,
        *,
        inputs: Iterable[Any],
        outputs: Iterable[Any],
        system_instruction: Iterable[Any],
        tool_definitions: Iterable[Any] | None = None,
        span: Any = None,
        log_record: Any = None,
        **_: Any,
    ) -> None:
        """Record an operation's content and stamp the references (never raises)."""
        try:
            self._complete(inputs, outputs, system_instruction, tool_definitions, span, log_record)
        except Exception:
            self.failed += 1
            self.guard.failed("recording an operation")

    def _complete(
        self,
        inputs: Iterable[Any],
        outputs: Iterable[Any],
        system_instruction: Iterable[Any],
        tool_definitions: Iterable[Any] | None,
        span: Any,
        log_record: Any,
    ) -> None:
        found = from_hook(inputs, outputs, system_instruction, tool_definitions)
        if not found.has_content:
            return
        ctx = span.get_span_context() if span is not None else None
        if ctx is None or not ctx.is_valid:
            logger.warning("loopscribe completion hook got content without a span; not recorded")
            self.failed += 1
            return
        attributes: Mapping[str, Any] = dict(getattr(span, "attributes", None) or {})
        status = getattr(span, "status", None)
        failed = status is not None and status.status_code.name == "ERROR"
        lab = labels(attributes, error=failed, description=getattr(status, "description", None))
        if failed and "error.type" not in attributes:
            lab.error = exception_error(getattr(span, "events", ())) or lab.error
        operation = attributes.get("gen_ai.operation.name")
        kind = OPERATION_KINDS.get(str(operation).lower()) if operation else None
        found.kind = kind or found.kind
        start_ns = getattr(span, "start_time", None)
        ref: SpanRef = span_ref(ctx, getattr(span, "parent", None), start_ns)
        now = datetime.now(UTC)
        name = getattr(span, "name", "") or ""
        try:
            written = self.book.record(
                ref,
                conversation_of(attributes),
                kind_of(found),
                None,
                lambda execution: plan(found, lab, execution, name, to_datetime(start_ns), now),
                None,
                now,
            )
        except (LoopscribeError, OSError) as exc:
            self.failed += 1
            logger.warning("loopscribe completion hook could not record: %s", exc)
            return
        self.recorded += 1
        span.set_attributes(written.refs)
        if log_record is not None:
            kept = {k: v for k, v in (log_record.attributes or {}).items() if k not in CONTENT_KEYS}
            log_record.attributes = {**kept, **written.refs}
        self._join(span)

    def _join(self, span: Any) -> None:
        """Join the span's processor chain (once), so its end writes its ``host_span`` record."""
        chain = getattr(span, "_span_processor", None)
        add = getattr(chain, "add_span_processor", None)
        if chain is None or not callable(add) or chain in self._joined:
            return
        add(self._ends)
        self._joined.add(chain)

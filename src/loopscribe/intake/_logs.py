"""OffloadingLogProcessor: GenAI content in log records, recorded; the records go on without it.

Some instrumentations put a call's content in OpenTelemetry log records
instead of its span: util-genai's ``gen_ai.client.inference.operation.details``
event (messages as structured attributes) and the older per-message events
(``gen_ai.user.message``, ``gen_ai.choice``, ..., the message in the body).
This ``LogRecordProcessor``, put in front of the host's own, records them
into the span's execution, as :class:`~._processor.OffloadingProcessor`
does for spans, and hands on a copy of each log record without its content
and with references to the records.

The per-message events of one call arrive one by one: the input messages
are kept until the reply (``gen_ai.choice``) comes and recorded with it
(or, without a reply, at :meth:`~OffloadingLogProcessor.force_flush`). A log
record outside any span is recorded under an ID of its own. When the span
goes through an ``OffloadingProcessor`` of the same folder, the span gets
the references too, and its ``host_span`` record.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import secrets
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, Final

from opentelemetry.sdk._logs import LogRecordProcessor, ReadWriteLogRecord

from .._errors import LoopscribeError
from .._hostkit import LOGGER, Guard
from .._redact import LineRedactor
from ._book import SpanRef, book_for
from ._found import Found, Message
from ._otel_genai import CONTENT_EVENTS, CONTENT_KEYS, DETAILS_EVENT, MESSAGE_EVENTS, read_log
from ._processor import conversation_of, to_datetime
from ._records import kind_of, labels, plan

logger = logging.getLogger(LOGGER)

_WAITING_SPANS: Final = 1_000
"""Calls whose input messages wait for their reply at once; the oldest is recorded without."""


class OffloadingLogProcessor(LogRecordProcessor):
    """Records GenAI content from log records into session files; hands the records on without it.

    Args:
        downstream: Receives every log record, content removed.
        directory: The sessions folder (created if missing).
        redact: As for :class:`~loopscribe.otel.OffloadingProcessor`.
    """

    def __init__(
        self,
        downstream: LogRecordProcessor,
        directory: str | os.PathLike[str],
        *,
        redact: LineRedactor | None = None,
    ) -> None:
        self.downstream = downstream
        self.book = book_for(directory, redact=redact)
        self._waiting: OrderedDict[tuple[int, int], tuple[SpanRef, list[Message]]] = OrderedDict()
        self.recorded = 0
        """Operations recorded."""
        self.failed = 0
        """Log records whose content could not be recorded (each logged; handed on without it)."""
        self.problems = 0
        """Log records whose content was not what the convention says (each logged)."""
        self.downstream_errors = 0
        """Times the downstream processor raised (each logged)."""
        self.guard = Guard("OffloadingLogProcessor")
        """The never-raise policy: unexpected failures counted, the first logged at ERROR."""

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        """Record the content, then hand the log record on without it (never raises)."""
        try:
            handed = self._offload(log_record)
        except Exception:
            self.failed += 1
            self.guard.failed("recording a log record")
            handed = _without(log_record, set(CONTENT_KEYS) | {""}, {})
        try:
            self.downstream.on_emit(handed)
        except Exception:
            self.downstream_errors += 1
            logger.exception("log record processor %r failed", self.downstream)

    def _offload(self, rw: ReadWriteLogRecord) -> ReadWriteLogRecord:
        record = rw.log_record
        attributes = record.attributes or {}
        name = getattr(record, "event_name", None) or attributes.get("event.name")
        if (
            name != DETAILS_EVENT
            and name not in CONTENT_EVENTS
            and CONTENT_KEYS.isdisjoint(attributes)
        ):
            return rw
        found = Found()
        read_log(name if isinstance(name, str) else None, attributes, record.body, found)
        if not found.has_content:
            return rw
        if found.problems:
            self.problems += 1
            logger.warning("loopscribe intake: log record %r: %s", name, "; ".join(found.problems))
        ref = self._ref(record)
        key = (ref.trace_id, ref.span_id)
        if name in MESSAGE_EVENTS:
            _, waiting = self._waiting.setdefault(key, (ref, []))
            waiting.extend(found.inputs or ())
            self._waiting.move_to_end(key)
            while len(self._waiting) > _WAITING_SPANS:
                self._write(*self._waiting.popitem(last=False)[1], Found(), attributes)
            return _without(rw, found.keys, {})
        earlier = self._waiting.pop(key, None)
        if earlier is not None:
            found.inputs = [*earlier[1], *(found.inputs or ())]
        refs = self._write(ref, [], found, attributes)
        return _without(rw, found.keys, refs)

    def _ref(self, record: Any) -> SpanRef:
        trace_id, span_id = record.trace_id or 0, record.span_id or 0
        if not trace_id or not span_id:
            # Outside any span: an execution of its own.
            trace_id, span_id = secrets.randbits(128) or 1, secrets.randbits(64) or 1
        flags = getattr(record, "trace_flags", None)
        return SpanRef(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=None,
            remote_parent_id=None,
            trace_flags=int(flags) if flags is not None else 1,
            start=to_datetime(record.timestamp or record.observed_timestamp),
        )

    def _write(
        self, ref: SpanRef, inputs: list[Message], found: Found, attributes: Any
    ) -> dict[str, str | int]:
        if inputs:
            found.inputs = [*inputs, *(found.inputs or ())]
        lab = labels(attributes)
        now = datetime.now(UTC)
        try:
            written = self.book.record(
                ref,
                conversation_of(attributes),
                kind_of(found),
                None,
                lambda execution: plan(found, lab, execution, "", ref.start, now),
                None,
                now,
            )
        except (LoopscribeError, OSError) as exc:
            self.failed += 1
            logger.warning("loopscribe intake could not record a log record's content: %s", exc)
            return {}
        self.recorded += 1
        return written.refs

    def _flush_waiting(self) -> None:
        while self._waiting:
            ref, inputs = self._waiting.popitem(last=False)[1]
            self._write(ref, inputs, Found(), {})

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Record the input messages still waiting for a reply, sync, flush downstream."""
        try:
            self._flush_waiting()
            self.book.flush()
        except Exception:
            self.guard.failed(f"flushing {self.book.directory}")
        return bool(self.downstream.force_flush(timeout_millis))

    def shutdown(self) -> None:
        """Record what waits, close the session files, shut the downstream processor down."""
        try:
            self._flush_waiting()
            self.book.close()
        except Exception:
            self.guard.failed(f"closing {self.book.directory}")
        self.downstream.shutdown()


def _without(
    rw: ReadWriteLogRecord, keys: set[str], refs: dict[str, str | int]
) -> ReadWriteLogRecord:
    """A copy of a log record without the content ``keys`` (``""``: the body), with ``refs``."""
    record = copy.copy(rw.log_record)
    record.attributes = {
        **{k: v for k, v in (rw.log_record.attributes or {}).items() if k not in keys},
        **refs,
    }
    if "" in keys:
        record.body = None
    return dataclasses.replace(rw, log_record=record)

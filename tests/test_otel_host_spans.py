"""Host spans in session files: one identity, stored whole, replayed and exported as they were."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from loopscribe import Event as LsEvent
from loopscribe import Execution, Session
from loopscribe._resumable_export import ResumableExport
from loopscribe.otel import (
    HOST_SPAN,
    SpanBridge,
    host_execution_id,
    host_span_id,
    replay,
    span_from_record_data,
    span_id,
    span_record_data,
)
from loopscribe.otel._export import OTLPJsonFileExporter

TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN = 0x00F067AA0BA902B7
PARENT = 0x00000000000000AB


def host_span(span: int = SPAN) -> ReadableSpan:
    """A span with every kind of value, events, links, a remote parent and an error status."""
    context = SpanContext(TRACE, span, False, TraceFlags(1), TraceState([("vendor", "x=1")]))
    return ReadableSpan(
        name="chat m",
        context=context,
        parent=SpanContext(TRACE, PARENT, True, TraceFlags(1)),
        resource=Resource({"service.name": "host", "pid": 7}, "https://schema/1"),
        attributes={
            "s": "text",
            "b": True,
            "i": 3,
            "f": 0.5,
            "nan": math.nan,
            "inf": -math.inf,
            "big": 2**70,
            "bytes": b"\x00\xff",
            "tuple": ("a", "b"),
            "empty": (),
            "map": {"k": (1, 2), "n": None},
        },
        events=[Event("exception", {"exception.type": "ValueError"}, 123)],
        links=[Link(SpanContext(TRACE, 0x1234, False, TraceFlags(0)), {"why": "batch"})],
        kind=SpanKind.CLIENT,
        status=Status(StatusCode.ERROR, "boom"),
        start_time=1_700_000_000_000_000_001,
        end_time=1_700_000_000_500_000_002,
        instrumentation_scope=InstrumentationScope("inst", "1.0", "https://s", {"a": 1}),
    )


def same(a: ReadableSpan, b: ReadableSpan) -> bool:
    """Whether two spans encode to the same OTLP protobuf (resource, scope and span)."""
    return bool(encode_spans([a]).SerializeToString() == encode_spans([b]).SerializeToString())


def test_a_stored_span_reads_back_exactly() -> None:
    """Every value kind, event, link, state, status, resource and scope survives the record."""
    span = host_span()
    back = span_from_record_data(span_record_data(span))
    assert same(span, back)
    assert math.isnan(back.attributes["nan"])  # type: ignore[arg-type,index]
    assert back.attributes["big"] == 2**70  # type: ignore[index]
    assert back.attributes["map"] == {"k": (1, 2), "n": None}  # type: ignore[index]
    assert back.parent is not None
    assert back.parent.is_remote
    assert back.context is not None
    assert back.context.trace_state == TraceState([("vendor", "x=1")])


def test_a_damaged_stored_span_is_a_value_error() -> None:
    """A hand-edited record is refused with ValueError, not a stray exception."""
    data = span_record_data(host_span())
    data["attributes"] = {"x": {"two": 1, "keys": 2}}
    with pytest.raises(ValueError, match="not a stored span"):
        span_from_record_data(data)


def test_host_executions_keep_the_host_span_id() -> None:
    """``otel:<hex>`` executions have the host's span ID for every attempt; others are derived."""
    execution_id = host_execution_id(SPAN)
    assert execution_id == "otel:00f067aa0ba902b7"
    assert host_span_id(execution_id) == SPAN
    assert (
        span_id("s" * 32, "r", execution_id, 1) == span_id("x" * 32, "y", execution_id, 3) == SPAN
    )
    assert host_span_id("otel:00F067AA0BA902B7") is None
    assert span_id("s" * 32, "r", "otel:nothex", 1) != 0
    with pytest.raises(ValueError, match="64-bit"):
        host_execution_id(0)


def _recorded(path: Path, spans: list[ReadableSpan]) -> None:
    """A session holding these host spans as the intake writes them: one run, a record each."""
    with Session.create(path) as session:
        run = session.begin_run(parent=f"00-{TRACE:032x}-{PARENT:016x}-01")
        for span in spans:
            assert span.context is not None
            ex = Execution(host_execution_id(span.context.span_id), "model")
            run.record(LsEvent("model_request", ex, {"messages": []}))
            run.record(LsEvent(HOST_SPAN, ex, span_record_data(span)))
        run.close()


def test_replay_emits_host_spans_as_stored_and_no_run_span(tmp_path: Path) -> None:
    """A run of host spans replays as exactly those spans: no derived span, no run span."""
    spans = [host_span(SPAN), host_span(SPAN + 1)]
    _recorded(tmp_path / "s.jsonl", spans)
    got: list[ReadableSpan] = []

    class Keep(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            got.append(span)

    assert replay(tmp_path / "s.jsonl", Keep()) == 2
    assert all(same(a, b) for a, b in zip(spans, got, strict=True))


def test_a_damaged_host_span_record_is_counted_not_raised(tmp_path: Path) -> None:
    """The bridge counts a host_span record it cannot read and goes on."""
    bridge = SpanBridge(SpanProcessor(), file_uri=tmp_path / "s.jsonl")
    with Session.create(tmp_path / "s.jsonl", observers=[bridge]) as session:
        run = session.begin_run(parent=None)
        ex = Execution(host_execution_id(SPAN), "model")
        run.record(LsEvent(HOST_SPAN, ex, {"name": "x"}, datetime.now(UTC)))
        run.close()
    assert bridge.failed_records == 1


def test_export_resumes_after_host_spans_without_sending_twice(tmp_path: Path) -> None:
    """The export cursor counts a host span by its host_span record: resume sends only new ones."""
    path = tmp_path / "s.jsonl"
    _recorded(path, [host_span(SPAN)])
    out = tmp_path / "spans.jsonl"
    first = ResumableExport(path, OTLPJsonFileExporter(out), "file").run()
    assert (first.sent, first.skipped) == (1, 0)
    with Session.open(path) as session:
        run = session.begin_run(parent=None)
        ex = Execution(host_execution_id(SPAN + 5), "model")
        run.record(LsEvent(HOST_SPAN, ex, span_record_data(host_span(SPAN + 5))))
        run.close()
    second = ResumableExport(path, OTLPJsonFileExporter(out), "file").run()
    assert (second.sent, second.skipped) == (1, 1)

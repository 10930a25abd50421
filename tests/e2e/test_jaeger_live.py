"""A live host exporting OTLP: through the Collector and straight to Jaeger, gRPC and HTTP.

Four sessions record the same scripted runs while a :class:`SpanBridge`
exports them through :func:`~loopscribe.otel.default_processor`, configured
only by the standard ``OTEL_EXPORTER_OTLP_*`` variables, each to another
destination: the Collector (running ``jaeger.yaml``) over gRPC and over
HTTP, and Jaeger's own OTLP receivers over gRPC and over HTTP. Each trace in
Jaeger must equal the spans loopscribe makes of its file, and the four must
be the same trace but for the IDs that name the session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import Session
from loopscribe.otel import SpanBridge, default_processor, replay

from ._sessions import as_spans, record_runs
from ._spans import Span, assert_same_spans, jaeger_spans, wait_for_spans
from ._stack import Collector, Jaeger, start_collector

# Attributes whose values name the session, its file or its run: they differ by design.
PER_SESSION = ("gen_ai.conversation.id", "session.id", "loopscribe.run.id", "loopscribe.file")


@pytest.fixture(scope="module")
def collector(jaeger: Jaeger, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """The Collector on jaeger.yaml, its file receiver watching an empty folder."""
    workdir = tmp_path_factory.mktemp("collector-live")
    (workdir / "none").mkdir()
    running = start_collector(
        workdir, jaeger=jaeger, files=f"{workdir}/none/*.otlp.jsonl", storage=workdir / "storage"
    )
    try:
        yield running
    finally:
        running.stop()


def _shape(spans: list[Span]) -> list[tuple[object, ...]]:
    """The trace without the session's IDs: names, kinds, attributes, and the tree by name path."""
    by_id = {s.span_id: s for s in spans}

    def path(span: Span) -> tuple[str, ...]:
        names: list[str] = []
        current: Span | None = span
        while current is not None:
            names.append(f"{current.name}/{current.attributes.get('loopscribe.execution.id', '')}")
            current = by_id.get(current.parent_id) if current.parent_id else None
        return tuple(reversed(names))

    def attributes(span: Span) -> tuple[tuple[str, str], ...]:
        return tuple(
            sorted(
                (k, "<per session>" if k in PER_SESSION or k.endswith("_ref") else v)
                for k, v in span.attributes.items()
            )
        )

    return sorted((path(s), s.kind, attributes(s)) for s in spans)


@pytest.mark.parametrize(
    ("destination", "protocol"),
    [
        ("collector", "grpc"),
        ("collector", "http/protobuf"),
        ("jaeger", "grpc"),
        ("jaeger", "http/protobuf"),
    ],
)
def test_a_live_host_gives_the_same_trace_every_way(
    destination: str,
    protocol: str,
    collector: Collector,
    jaeger: Jaeger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reference_shape: list[tuple[object, ...]],
) -> None:
    """Spans sent live over ``protocol`` to ``destination`` arrive in Jaeger as the file says."""
    target = collector if destination == "collector" else jaeger
    grpc = protocol == "grpc"
    endpoint = f"http://{target.otlp_grpc}" if grpc else target.otlp_http
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    path = tmp_path / f"live-{destination}-{'grpc' if grpc else 'http'}.jsonl"
    processor = default_processor(path)
    try:
        with Session.create(path, observers=[SpanBridge(processor, file_uri=path)]) as session:
            record_runs(session, runs=2, tools=3)
    finally:
        processor.shutdown()
    assert not path.with_name(path.name + ".otlp.jsonl").exists(), "spans went to a file"

    exporter = InMemorySpanExporter()
    replay(path, SimpleSpanProcessor(exporter))
    expected = as_spans(list(exporter.get_finished_spans()))
    wait_for_spans(jaeger, expected, extra=collector.program.log_tail())
    stored = jaeger_spans(jaeger, {s.trace_id for s in expected})
    assert_same_spans(stored, expected)
    assert _shape(stored) == reference_shape


@pytest.fixture(scope="module")
def reference_shape(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[object, ...]]:
    """The shape of the scripted runs' trace, from a file recorded without any exporter."""
    path = tmp_path_factory.mktemp("reference") / "reference.jsonl"
    with Session.create(path) as session:
        record_runs(session, runs=2, tools=3)
    exporter = InMemorySpanExporter()
    replay(path, SimpleSpanProcessor(exporter))
    return _shape(as_spans(list(exporter.get_finished_spans())))

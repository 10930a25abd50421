"""loopscribe inside the host's own OpenTelemetry: its provider, resource, processors and trace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import Execution, Session, events, read
from loopscribe.otel import SpanBridge, default_export_path, run_span_id, trace_id
from loopscribe.testing import captured_spans

from .otlp_receiver import http_receiver


def host_provider(service: str = "host-app") -> tuple[TracerProvider, InMemorySpanExporter]:
    """A host's own SDK provider: its resource, and a processor of its own."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def one_call(session: Session, **begin: object) -> str:
    """One run with one model call; returns the run ID."""
    with session.begin_run(**begin) as run:  # type: ignore[arg-type]
        ex = Execution("m1", "model")
        run.record(events.model_exec_start(ex, "gpt-test"))
        run.record(events.model_exec_end(ex, model="gpt-test"))
        return run.id


def ours(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    """The spans loopscribe made, not the host's."""
    scope = "loopscribe"
    return [s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == scope]


def test_bound_bridge_uses_the_hosts_resource_processors_and_trace(session_path: Path) -> None:
    """Spans go through the host's processors with its resource, under the active host span."""
    provider, exporter = host_provider()
    tracer = provider.get_tracer("host")
    bridge = SpanBridge(tracer_provider=provider)
    with (
        tracer.start_as_current_span("host request") as host,
        Session.create(session_path, observers=[bridge]) as session,
    ):
        one_call(session)  # no parent given: the active span is joined
    spans = exporter.get_finished_spans()
    mine = ours(spans)
    assert [s.name for s in mine] == ["chat gpt-test", "invoke_agent"]
    host_ctx = host.get_span_context()
    for span in mine:
        assert span.resource.attributes["service.name"] == "host-app"
        assert span.context is not None
        assert span.context.trace_id == host_ctx.trace_id
    root = mine[-1]
    assert root.parent is not None
    assert root.parent.span_id == host_ctx.span_id
    # The run's parent is stored, so the file alone puts a replay in the same trace.
    start = next(r for r in read(session_path) if r.type == "run_start")
    assert start.data["traceparent"].split("-")[1] == f"{host_ctx.trace_id:032x}"
    assert bridge.tracer_provider is provider


def test_parent_none_opts_out_of_the_active_span(session_path: Path) -> None:
    """parent=None gives the run a trace of its own even inside a host span."""
    provider, _ = host_provider()
    captured = captured_spans()
    with (
        provider.get_tracer("host").start_as_current_span("host request"),
        Session.create(session_path, observers=[SpanBridge(captured.processor)]) as s,
    ):
        run_id = one_call(s, parent=None)
    (root,) = [span for span in captured.spans if span.name == "invoke_agent"]
    assert root.parent is None
    assert root.context is not None
    assert root.context.trace_id == trace_id(s.id, run_id)
    assert root.context.span_id == run_span_id(s.id, run_id)


def test_a_run_from_the_past_joins_no_active_span(session_path: Path) -> None:
    """A run given a source timestamp (an import) is not put under whatever span is active."""
    provider, _ = host_provider()
    with (
        provider.get_tracer("host").start_as_current_span("host request"),
        Session.create(session_path) as session,
        session.begin_run(timestamp=datetime(2026, 1, 2, tzinfo=UTC)) as run,
    ):
        run.record(events.turn_start(Execution("t", "turn"), 1))
        run.record(events.turn_end(Execution("t", "turn"), 1))
    start = next(r for r in read(session_path) if r.type == "run_start")
    assert "traceparent" not in start.data


def test_without_a_host_provider_the_embedded_default_writes_beside_the_session(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No global SDK provider, no endpoint: the bridge exports OTLP JSON next to the file."""
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_OTLP"):
            monkeypatch.delenv(name)
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    bridge = SpanBridge()
    assert bridge.processor is None
    with Session.create(session_path, observers=[bridge]) as session:
        one_call(session)
    bridge.shutdown()
    lines = default_export_path(session_path).read_text().splitlines()
    assert len(lines) >= 1
    assert '"chat gpt-test"' in "".join(lines)
    assert '"loopscribe"' in "".join(lines)  # the embedded default's service.name


def test_bad_bindings_are_refused() -> None:
    """A processor and a provider at once, a resource with a provider, or a non-SDK provider."""
    provider, _ = host_provider()
    with pytest.raises(ValueError, match="not both"):
        SpanBridge(captured_spans().processor, tracer_provider=provider)
    with pytest.raises(ValueError, match="provider's resource"):
        SpanBridge(tracer_provider=provider, resource=Resource.create({}))
    with pytest.raises(TypeError, match="TracerProvider"):
        SpanBridge(tracer_provider=trace.NoOpTracerProvider())


HOST_PROGRAM = textwrap.dedent(
    """
    import sys
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from loopscribe import Execution, Session, events
    from loopscribe.otel import SpanBridge

    endpoint, path = sys.argv[1], sys.argv[2]
    provider = TracerProvider(resource=Resource.create({"service.name": "checkout"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)  # the host configures OpenTelemetry, once

    with trace.get_tracer("checkout").start_as_current_span("POST /order") as span:
        with Session.create(path, observers=[SpanBridge()]) as session:
            with session.begin_run() as run:
                ex = Execution("m1", "model")
                run.record(events.model_exec_start(ex, "gpt-test", provider="openai"))
                run.record(events.model_exec_end(ex, model="gpt-test"))
        print(f"{span.get_span_context().trace_id:032x}")
    provider.shutdown()
    """
)


def test_host_with_a_global_provider_gets_loopscribe_spans_in_its_own_pipeline(
    tmp_path: Path,
) -> None:
    """A host that set the global TracerProvider: one OTLP export, its service, its trace."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with http_receiver() as received:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                HOST_PROGRAM,
                f"{received.endpoint}/v1/traces",
                str(tmp_path / "s.jsonl"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        host_trace = done.stdout.strip()
        spans = received.spans()
        resources = [
            {a.key: a.value.string_value for a in rs.resource.attributes}
            for request in received.requests
            for rs in request.resource_spans
        ]
    assert sorted(s.name for s in spans) == ["POST /order", "chat gpt-test", "invoke_agent"]
    assert {s.trace_id.hex() for s in spans} == {host_trace}
    assert {r["service.name"] for r in resources} == {"checkout"}
    host = next(s for s in spans if s.name == "POST /order")
    run = next(s for s in spans if s.name == "invoke_agent")
    assert run.parent_span_id == host.span_id
    # No second pipeline: nothing was written beside the session.
    assert not default_export_path(tmp_path / "s.jsonl").exists()

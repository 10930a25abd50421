"""What the OTLP exporter makes of the bridge's spans: one resource, whoever made the span."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import Execution, Session, events
from loopscribe.otel import SpanBridge


def test_bridge_spans_share_one_resource_with_the_hosts_spans(session_path: Path) -> None:
    """Bridge and host spans of one provider encode as one ResourceSpans with its attributes."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "host-app", "v": 3}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bridge = SpanBridge(tracer_provider=provider)
    with (
        provider.get_tracer("host").start_as_current_span("host request"),
        Session.create(session_path, observers=[bridge]) as session,
        session.begin_run() as run,
    ):
        for n in range(3):
            model = Execution(f"m{n}", "model")
            run.record(events.model_exec_start(model, "gpt-test", provider="openai"))
            run.record(events.model_exec_end(model, model="gpt-test"))
    spans = exporter.get_finished_spans()
    scopes = {span.instrumentation_scope.name for span in spans if span.instrumentation_scope}
    assert scopes == {"loopscribe", "host"}
    for span in spans:
        assert span.resource == provider.resource
        assert hash(span.resource) == hash(provider.resource)
    request = encode_spans(spans)
    assert len(request.resource_spans) == 1
    resource_spans = request.resource_spans[0]
    attributes = {kv.key: kv.value for kv in resource_spans.resource.attributes}
    assert attributes["service.name"].string_value == "host-app"
    assert attributes["v"].int_value == 3
    assert sum(len(scope.spans) for scope in resource_spans.scope_spans) == len(spans) == 5


def test_a_resource_given_to_the_bridge_is_kept_as_given(session_path: Path) -> None:
    """The spans carry the given Resource's attributes and schema URL, and compare equal to it."""
    exporter = InMemorySpanExporter()
    resource = Resource({"service.name": "svc", "deployment.environment": "test"}, "https://x/1.0")
    bridge = SpanBridge(SimpleSpanProcessor(exporter), resource=resource)
    with Session.create(session_path, observers=[bridge]) as session, session.begin_run():
        pass
    (span,) = exporter.get_finished_spans()
    assert span.resource == resource
    assert dict(span.resource.attributes) == dict(resource.attributes)
    assert span.resource.schema_url == "https://x/1.0"
    merged = span.resource.merge(Resource({"extra": "1"}))
    assert merged.attributes["extra"] == "1"
    assert merged.attributes["service.name"] == "svc"

"""loopscribe's spans next to a framework's own OpenTelemetry instrumentation (pydantic-ai)."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.test import TestModel

from loopscribe import Session
from loopscribe.adapters.pydantic_ai import LoopscribeCapability
from loopscribe.otel import SpanBridge


def test_both_instrumentations_share_the_hosts_trace(session_path: Path) -> None:
    """With a host span around the run, pydantic-ai's spans and loopscribe's are one trace.

    Neither subtree floats on its own: both hang under the host span, so a
    backend shows the framework's view and loopscribe's (with its record
    references) side by side in one trace.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent(
        TestModel(custom_output_text="Sunny."),
        name="weather-bot",
        capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))],
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    tracer = provider.get_tracer("weather-app")
    with (
        tracer.start_as_current_span("handle request") as host,
        Session.create(session_path, observers=[SpanBridge(tracer_provider=provider)]) as s,
        s.begin_run() as run,
    ):
        agent.run_sync("Weather in Lisbon?", capabilities=[LoopscribeCapability(run)])
    spans = exporter.get_finished_spans()
    scopes = {s.instrumentation_scope.name for s in spans if s.instrumentation_scope}
    assert "loopscribe" in scopes
    assert scopes - {"loopscribe", "weather-app"}, scopes  # pydantic-ai's own spans are there

    host_ctx = host.get_span_context()
    assert {s.context.trace_id for s in spans if s.context} == {host_ctx.trace_id}
    by_id = {s.context.span_id: s for s in spans if s.context}
    roots = {
        s.instrumentation_scope.name if s.instrumentation_scope else "?"
        for s in spans
        if s.parent is not None and s.parent.span_id == host_ctx.span_id
    }
    assert "loopscribe" in roots
    assert roots - {"loopscribe"}, roots  # the framework's subtree also starts at the host span
    for span in spans:
        if span.parent is not None:
            assert span.parent.span_id in by_id, span.name  # no dangling subtree
    ours = [
        s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == "loopscribe"
    ]
    assert {s.resource.attributes["service.name"] for s in ours} == {"weather-app"}

"""loopscribe's spans next to the Agents SDK's own tracing, exported by OpenInference.

``openinference-instrumentation-openai-agents`` turns the Agents SDK's traces
into OpenTelemetry spans; loopscribe's bridge turns its records into spans
of the same run. Both go through one ``TracerProvider``. They must not make
two unrelated trees: with a host span around the run both hang under it
(the way the README documents), and without one the SDK's spans can be
parented under loopscribe's run span, whose ID is known before it is
exported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from loopscribe import Session
from loopscribe.adapters.openai_agents import LoopscribeHooks
from loopscribe.otel import SpanBridge, run_span_id, trace_id

OPENINFERENCE = "openinference.instrumentation.openai_agents"


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"21C and sunny in {city}"


def weather_agent() -> Agent[Any]:
    usage = Usage(requests=1, input_tokens=40, output_tokens=6, total_tokens=46)
    model = ScriptedModel(
        [
            ModelStep(
                output=[function_call("get_weather", {"city": "Lisbon"}, call_id="call_1")],
                usage=usage,
            ),
            ModelStep(output=[assistant_message("21C and sunny in Lisbon.")], usage=usage),
        ],
        emit_traces=True,
    )
    return Agent(name="weather-bot", instructions="Use the tool.", model=model, tools=[get_weather])


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """The host's TracerProvider, with the Agents SDK's OpenInference instrumentation on it."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "weather-app"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        yield tracer_provider, exporter
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()


def scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope else "?"


def check_one_tree(spans: list[ReadableSpan], trace: int, root: int) -> None:
    """Both instrumentations' spans are in ``trace``, below ``root``, none dangling."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    assert {scope(s) for s in spans} >= {"loopscribe", OPENINFERENCE}, {scope(s) for s in spans}
    assert {s.context.trace_id for s in spans if s.context is not None} == {trace}
    for span in spans:
        current = span
        while current.parent is not None and current.parent.span_id in by_id:
            current = by_id[current.parent.span_id]
        # The top of each chain is the root itself, or a child of it (a host span not exported).
        top = current.parent.span_id if current.parent is not None else None
        own = current.context.span_id if current.context is not None else None
        assert root in (top, own), f"{scope(span)} span {span.name!r} is not below the root"
    # Both describe the same tool call, and both carry the host's resource.
    assert any(s.name == "execute_tool get_weather" for s in spans if scope(s) == "loopscribe")
    assert any(s.name == "get_weather" for s in spans if scope(s) == OPENINFERENCE)
    assert {s.resource.attributes["service.name"] for s in spans} == {"weather-app"}


def test_with_a_host_span_both_trees_hang_under_it(
    session_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """The README's way: start the run inside a host span; both subtrees are its children."""
    tracer_provider, exporter = provider
    tracer = tracer_provider.get_tracer("weather-app")
    with (
        tracer.start_as_current_span("handle request") as host,
        Session.create(
            session_path, observers=[SpanBridge(tracer_provider=tracer_provider)]
        ) as session,
        session.begin_run() as run,
    ):
        result = asyncio.run(LoopscribeHooks(run).run(weather_agent(), "Weather in Lisbon?"))
    assert result.final_output == "21C and sunny in Lisbon."
    spans = list(exporter.get_finished_spans())
    host_ctx = host.get_span_context()
    check_one_tree(spans, host_ctx.trace_id, host_ctx.span_id)
    children = {scope(s) for s in spans if s.parent and s.parent.span_id == host_ctx.span_id}
    assert {"loopscribe", OPENINFERENCE} <= children, children


def test_without_a_host_span_the_sdk_tree_hangs_under_the_run_span(
    session_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """No host span: make loopscribe's run span current, and the SDK's spans nest under it."""
    tracer_provider, exporter = provider
    with (
        Session.create(
            session_path, observers=[SpanBridge(tracer_provider=tracer_provider)]
        ) as session,
        session.begin_run() as run,
    ):
        run_trace = trace_id(session.id, run.id)
        run_span = run_span_id(session.id, run.id)
        parent = SpanContext(run_trace, run_span, is_remote=False, trace_flags=TraceFlags(1))
        with trace.use_span(NonRecordingSpan(parent)):
            asyncio.run(LoopscribeHooks(run).run(weather_agent(), "Weather in Lisbon?"))
    spans = list(exporter.get_finished_spans())
    (run_root,) = [s for s in spans if s.context is not None and s.context.span_id == run_span]
    assert scope(run_root) == "loopscribe"
    assert run_root.parent is None
    check_one_tree(spans, run_trace, run_span)
    sdk_roots = [s for s in spans if scope(s) == OPENINFERENCE and s.parent is not None]
    assert any(s.parent.span_id == run_span for s in sdk_roots if s.parent is not None)


def test_without_either_the_two_would_be_separate_traces(
    session_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """Why the README asks for one of the two: left alone, each starts its own trace."""
    tracer_provider, exporter = provider
    with (
        Session.create(
            session_path, observers=[SpanBridge(tracer_provider=tracer_provider)]
        ) as session,
        session.begin_run() as run,
    ):
        asyncio.run(LoopscribeHooks(run).run(weather_agent(), "Weather in Lisbon?"))
    traces = {scope(s): s.context.trace_id for s in exporter.get_finished_spans() if s.context}
    assert traces["loopscribe"] == trace_id(session.id, run.id)
    assert traces[OPENINFERENCE] != traces["loopscribe"]

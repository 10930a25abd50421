"""Sessions recorded for the Collector tests, and their spans written as span-file lines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import AssistantMessage, Execution, Session, TextContent, ToolCall, Usage, events
from loopscribe.otel import OTLPJsonFileExporter, encode_otlp_json, replay

from ._spans import Span, spans_of_request


def record_runs(session: Session, runs: int, *, tools: int = 2) -> None:
    """``runs`` agent runs, each a model call that asks for ``tools`` tools, and the tools."""
    for number in range(runs):
        with session.begin_run() as run:
            agent = Execution(f"agent-{number}", "agent")
            model = Execution(f"model-{number}", "model", parent_id=agent.id)
            calls = tuple(
                ToolCall(f"call-{number}-{t}", "lookup", {"q": f"body {number}.{t}"})
                for t in range(tools)
            )
            reply = AssistantMessage(
                (TextContent("body text"), *calls), model="e2e-model", usage=Usage(10, 5)
            )
            run.record(events.agent_start(agent, "e2e-agent"))
            run.record(events.model_exec_start(model, "e2e-model", provider="e2e"))
            run.record(events.model_exec_end(model, message=reply, usage=reply.usage))
            for call in calls:
                tool = Execution(call.id, "tool", parent_id=agent.id)
                run.record(events.tool_exec_start(tool, "lookup", call.arguments))
                run.record(events.tool_exec_end(tool, "lookup", {"found": call.id}))
            run.record(events.agent_end(agent, "e2e-agent", stop_reason="end_turn", turns=1))


def session_spans(path: Path, runs: int, *, tools: int = 2) -> list[ReadableSpan]:
    """Record a session at ``path`` and return the spans loopscribe makes of it."""
    with Session.create(path) as session:
        record_runs(session, runs, tools=tools)
    exporter = InMemorySpanExporter()
    replay(path, SimpleSpanProcessor(exporter))
    spans = list(exporter.get_finished_spans())
    assert len(spans) == runs * (tools + 3), f"{len(spans)} spans from {runs} runs"
    return spans


def chunks(spans: Sequence[ReadableSpan], size: int) -> list[list[ReadableSpan]]:
    """``spans`` cut into export batches of ``size``: one span-file line each."""
    return [list(spans[i : i + size]) for i in range(0, len(spans), size)]


def append_lines(span_file: Path, batches: Sequence[Sequence[ReadableSpan]]) -> list[Span]:
    """Append one line per batch, as loopscribe's file exporter does; the spans written."""
    exporter = OTLPJsonFileExporter(span_file)
    try:
        for batch in batches:
            assert exporter.export(batch).name == "SUCCESS"
    finally:
        exporter.shutdown()
    return [s for batch in batches for s in as_spans(batch)]


def as_spans(batch: Sequence[ReadableSpan]) -> list[Span]:
    """The reduced :class:`Span` of each SDK span, through the same OTLP JSON encoding."""
    return spans_of_request(json.loads(encode_otlp_json(batch)))

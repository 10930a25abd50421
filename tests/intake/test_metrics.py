"""GenAI metrics of the host's spans, live through the OffloadingProcessor, counted once."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from loopscribe.intake import OffloadingProcessor

from ._support import EMBEDDED, FakeOpenAI, conversation, session_files

TOKENS = "gen_ai.client.token.usage"
DURATION = "gen_ai.client.operation.duration"
FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
TOOL = "gen_ai.execute_tool.duration"
AGENT = "gen_ai.invoke_agent.duration"


def points(data: MetricsData | None, name: str) -> list[Any]:
    """Every data point of the metric ``name`` (none when nothing was recorded)."""
    if data is None:
        return []
    return [
        point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


class Pipeline:
    """A host's TracerProvider with an OffloadingProcessor; metrics to an in-memory reader."""

    def __init__(self, directory: Path, **processor: Any) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.provider = TracerProvider()
        self.original = InMemorySpanExporter()
        self.provider.add_span_processor(SimpleSpanProcessor(self.original))
        self.downstream = InMemorySpanExporter()
        self.processor = OffloadingProcessor(
            SimpleSpanProcessor(self.downstream),
            directory,
            meter_provider=self.meter_provider,
            **processor,
        )
        self.provider.add_span_processor(self.processor)

    def spans(self) -> list[ReadableSpan]:
        """The spans as the instrumentation made them."""
        return list(self.original.get_finished_spans())

    def metrics(self) -> MetricsData | None:
        """What the reader holds now."""
        return self.reader.get_metrics_data()


def attrs(span: ReadableSpan) -> Mapping[str, Any]:
    """A span's attributes."""
    return span.attributes or {}


def ids(span: ReadableSpan) -> tuple[int, int]:
    """A span's trace and span IDs."""
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def duration_s(span: ReadableSpan) -> float:
    """A span's duration in seconds."""
    assert span.start_time is not None
    assert span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


def test_openinference_openai_calls_give_their_metrics(tmp_path: Path) -> None:
    """Real OpenInference spans: token sums are the spans' usage, durations theirs, IDs kept."""
    from openinference.instrumentation.openai import OpenAIInstrumentor

    p = Pipeline(tmp_path)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=p.provider)
    try:
        client = FakeOpenAI().client()
        conversation(client, stream=True)
        client.embeddings.create(model="text-embedding-3-small", input=EMBEDDED)
    finally:
        instrumentor.uninstrument()
    spans = p.spans()
    chats = [s for s in spans if attrs(s).get("openinference.span.kind") == "LLM"]
    embeds = [s for s in spans if attrs(s).get("openinference.span.kind") == "EMBEDDING"]
    assert len(chats) == 3
    assert len(embeds) == 1
    data = p.metrics()

    tokens = {
        (pt.attributes["gen_ai.operation.name"], pt.attributes["gen_ai.token.type"]): pt
        for pt in points(data, TOKENS)
    }
    assert {k: pt.sum for k, pt in tokens.items()} == {
        ("chat", "input"): sum(attrs(s)["llm.token_count.prompt"] for s in chats),
        ("chat", "output"): sum(attrs(s)["llm.token_count.completion"] for s in chats),
        ("embeddings", "input"): attrs(embeds[0])["llm.token_count.prompt"],
    }
    assert tokens["chat", "input"].count == 3
    chat_labels = dict(tokens["chat", "input"].attributes)
    assert chat_labels["gen_ai.provider.name"] == "openai"
    assert chat_labels["gen_ai.request.model"] == attrs(chats[0])["llm.model_name"]

    durations = {pt.attributes["gen_ai.operation.name"]: pt for pt in points(data, DURATION)}
    assert durations["chat"].count == 3
    assert durations["chat"].sum == pytest.approx(sum(map(duration_s, chats)))
    assert durations["embeddings"].sum == pytest.approx(duration_s(embeds[0]))

    streamed = [s for s in chats if any(e.name == "First Token Stream Event" for e in s.events)]
    assert len(streamed) == 2
    (first_chunk,) = points(data, FIRST_CHUNK)
    assert first_chunk.count == 2
    expected = sum(
        (next(e for e in s.events if e.name == "First Token Stream Event").timestamp - s.start_time)
        / 1e9
        for s in streamed
        if s.start_time is not None
    )
    assert first_chunk.sum == pytest.approx(expected)

    chat_ids = {ids(s) for s in chats}
    exemplars = [e for pt in points(data, DURATION) for e in pt.exemplars]
    exemplars += [e for pt in points(data, TOKENS) for e in pt.exemplars]
    assert exemplars
    found = {(e.trace_id, e.span_id) for e in exemplars}
    assert found <= chat_ids | {ids(embeds[0])}
    assert found & chat_ids
    # The bodies were recorded all the same.
    assert session_files(tmp_path)


def test_an_official_convention_span_is_not_counted_twice(tmp_path: Path) -> None:
    """The official instrumentations record their own metrics: none again unless asked."""
    usage = {"gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 30}
    for forced, expected in ((None, []), (False, []), (True, [120])):
        p = Pipeline(tmp_path / str(forced), metrics=forced)
        tracer = p.provider.get_tracer("official")
        with tracer.start_as_current_span("chat gpt-4o") as span:
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    **usage,
                }
            )
        inputs = [
            pt.sum
            for pt in points(p.metrics(), TOKENS)
            if pt.attributes["gen_ai.token.type"] == "input"
        ]
        assert inputs == expected, forced
        if forced:
            (pt,) = [
                x
                for x in points(p.metrics(), TOKENS)
                if x.attributes["gen_ai.token.type"] == "input"
            ]
            assert {(e.trace_id, e.span_id) for e in pt.exemplars} <= {ids(p.spans()[0])}


def test_metrics_false_turns_openinference_off(tmp_path: Path) -> None:
    """``metrics=False``: an OpenInference span is recorded but not measured."""
    p = Pipeline(tmp_path, metrics=False)
    with p.provider.get_tracer("oi").start_as_current_span("ChatCompletion") as span:
        span.set_attributes(
            {
                "openinference.span.kind": "LLM",
                "llm.token_count.prompt": 10,
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "hi",
            }
        )
    assert points(p.metrics(), TOKENS) == []
    assert p.processor.metrics is None
    assert p.processor.recorded == 1


def test_openinference_tools_agents_cache_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tool and agent durations; cache and reasoning counted apart under ``both``; error type."""
    monkeypatch.setenv("LOOPSCRIBE_GENAI_SEMCONV", "both")
    p = Pipeline(tmp_path)
    tracer = p.provider.get_tracer("oi")
    with tracer.start_as_current_span("coder") as agent:
        agent.set_attribute("openinference.span.kind", "AGENT")
        with tracer.start_as_current_span("Messages") as chat:
            chat.set_attributes(
                {
                    "openinference.span.kind": "LLM",
                    "llm.provider": "anthropic",
                    "llm.model_name": "claude-sonnet-4",
                    "llm.token_count.prompt": 1200,
                    "llm.token_count.completion": 300,
                    "llm.token_count.prompt_details.cache_read": 1000,
                    "llm.token_count.prompt_details.cache_write": 50,
                    "llm.token_count.completion_details.reasoning": 40,
                }
            )
        with tracer.start_as_current_span("grep") as tool:
            tool.set_attributes({"openinference.span.kind": "TOOL", "tool.name": "grep"})
            tool.set_status(Status(StatusCode.ERROR, "boom"))
            tool.record_exception(TimeoutError("slow"))
    data = p.metrics()
    sums = {
        name: sum(pt.value for pt in points(data, name))
        for name in (
            "gen_ai.client.inference.usage.input_tokens",
            "gen_ai.client.inference.usage.cache_read.input_tokens",
            "gen_ai.client.inference.usage.cache_write.input_tokens",
            "gen_ai.client.inference.usage.reasoning.output_tokens",
        )
    }
    assert sums == {
        "gen_ai.client.inference.usage.input_tokens": 1200,
        "gen_ai.client.inference.usage.cache_read.input_tokens": 1000,
        "gen_ai.client.inference.usage.cache_write.input_tokens": 50,
        "gen_ai.client.inference.usage.reasoning.output_tokens": 40,
    }
    by_name = {s.name: s for s in p.spans()}
    (tool_point,) = points(data, TOOL)
    assert tool_point.sum == pytest.approx(duration_s(by_name["grep"]))
    assert dict(tool_point.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "grep",
        "error.type": "TimeoutError",
    }
    assert {(e.trace_id, e.span_id) for e in tool_point.exemplars} == {ids(by_name["grep"])}
    (agent_point,) = points(data, AGENT)
    assert agent_point.sum == pytest.approx(duration_s(by_name["coder"]))
    assert agent_point.attributes["gen_ai.agent.name"] == "coder"


HOSTILE: list[Any] = [
    -1,
    -(2**70),
    2**63,
    2**200,
    1.5,
    float("nan"),
    float("inf"),
    True,
    "12",
    b"1",
]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_hostile_token_counts_are_left_out(tmp_path: Path, value: Any) -> None:
    """A token count that is not a whole number OTLP carries is left out; nothing raises."""
    p = Pipeline(tmp_path)
    tracer = p.provider.get_tracer("oi")
    with tracer.start_as_current_span("ChatCompletion") as span:
        span.set_attributes(
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "m",
                "llm.token_count.completion": 7,
                "llm.token_count.prompt_details.cache_read": value,
            }
        )
        span.set_attribute("llm.token_count.prompt", value)
        span.add_event("First Token Stream Event", timestamp=1)  # before the span's start
    data = p.metrics()
    tokens = {pt.attributes["gen_ai.token.type"]: pt.sum for pt in points(data, TOKENS)}
    assert tokens == {"output": 7}
    (duration,) = points(data, DURATION)
    assert duration.attributes["gen_ai.provider.name"] == "_OTHER"
    assert [pt.sum for pt in points(data, FIRST_CHUNK)] == [0]
    assert p.processor.metrics_errors == 0
    assert len(p.downstream.get_finished_spans()) == 1


def test_without_a_meter_provider_the_embedded_default_writes_beside_the_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No MeterProvider anywhere: OTLP JSON lines in the folder, the span's IDs as exemplars."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    provider = TracerProvider()
    processor = OffloadingProcessor(SimpleSpanProcessor(InMemorySpanExporter()), tmp_path)
    provider.add_span_processor(processor)
    with provider.get_tracer("oi").start_as_current_span("ChatCompletion") as span:
        span.set_attributes(
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": 11,
                "llm.token_count.completion": 7,
            }
        )
    provider.shutdown()
    written = tmp_path / "intake.metrics.otlp.jsonl"
    lines = written.read_bytes().splitlines()
    assert lines
    last = orjson.loads(lines[-1])
    metrics = {
        m["name"]: m
        for rm in last["resourceMetrics"]
        for sm in rm["scopeMetrics"]
        for m in sm["metrics"]
    }
    tokens = metrics[TOKENS]["histogram"]["dataPoints"]
    assert sorted(int(p["sum"]) for p in tokens) == [7, 11]
    context = span.get_span_context()
    exemplar = tokens[0]["exemplars"][0]
    assert exemplar["traceId"] == f"{context.trace_id:032x}"
    assert exemplar["spanId"] == f"{context.span_id:016x}"
    assert written not in session_files(tmp_path)


def test_the_official_openai_instrumentation_s_own_metrics_are_not_doubled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """opentelemetry-instrumentation-openai-v2 records its metrics; the processor adds none."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK", raising=False)
    p = Pipeline(tmp_path)
    instrumentor = OpenAIInstrumentor()  # type: ignore[no-untyped-call]
    instrumentor.instrument(tracer_provider=p.provider, meter_provider=p.meter_provider)
    try:
        conversation(FakeOpenAI().client(), stream=False)
    finally:
        instrumentor.uninstrument()
    chats = p.spans()
    assert len(chats) == 2
    usage = [attrs(s)["gen_ai.usage.input_tokens"] for s in chats]
    inputs = [
        pt for pt in points(p.metrics(), TOKENS) if pt.attributes["gen_ai.token.type"] == "input"
    ]
    assert sum(pt.count for pt in inputs) == len(chats)
    assert sum(pt.sum for pt in inputs) == sum(usage)
    assert p.processor.metrics is None

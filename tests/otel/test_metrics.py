"""GenAI metrics from the bridge's spans: the SDK's in-memory reader and a real OTLP socket."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan

from loopscribe import AssistantMessage, Execution, Run, Session, TextContent, Usage, read
from loopscribe import events as ev
from loopscribe.importers.claude_code import import_transcript
from loopscribe.otel import (
    GenAIMetrics,
    SpanBridge,
    metrics_data,
    replay,
    semconv_mode,
    span_id,
    trace_id,
)
from loopscribe.testing import captured_spans

DATA = Path(__file__).parent.parent / "data" / "transcripts" / "claude-code"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """A record time ``seconds`` after T0."""
    return T0 + timedelta(seconds=seconds)


def scenario(run: Run) -> None:
    """An agent that streams one model call (first chunk 0.25 s after the request), then a tool."""
    agent = Execution("agent_1", "agent")
    model = Execution("model_1", "model", parent_id="agent_1")
    tool = Execution("call_1", "tool", parent_id="agent_1")
    run.record(ev.agent_start(agent, "coder", timestamp=at(0)))
    run.record(
        ev.model_exec_start(model, "gpt-test", provider="openai", stream=True, timestamp=at(1))
    )
    run.record(ev.model_request(model, [], timestamp=at(1.5)))
    run.record(ev.message_update(model, AssistantMessage((TextContent("x"),)), timestamp=at(1.75)))
    usage = Usage(1200, 300, cache_read_tokens=1000, cache_write_tokens=50, reasoning_tokens=40)
    answer = AssistantMessage((TextContent("hi"),), model="gpt-test-2026", usage=usage)
    run.record(ev.model_exec_end(model, message=answer, usage=usage, timestamp=at(4)))
    run.record(ev.tool_exec_start(tool, "grep", {"q": "x"}, timestamp=at(5)))
    run.record(ev.tool_exec_end(tool, "grep", "ok", error=TimeoutError("t"), timestamp=at(5.5)))
    run.record(ev.agent_end(agent, "coder", timestamp=at(7)))


def points(data: MetricsData | None, name: str) -> list[Any]:
    """Every data point of the metric ``name``."""
    assert data is not None
    return [
        point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def recorded(tmp_path: Path, provider: MeterProvider) -> tuple[Session, Path]:
    """Record the scenario with a live bridge whose metrics go to ``provider``."""
    path = tmp_path / "s.jsonl"
    captured = captured_spans()
    bridge = SpanBridge(captured.processor, file_uri=path, metrics=provider)
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        scenario(run)
    return session, path


def run_id_of(path: Path) -> str:
    """The file's only run."""
    return next(r.run_id for r in read(path) if r.run_id)


def test_live_metrics_equal_the_records(tmp_path: Path) -> None:
    """Tokens, durations and first-chunk time are the records' own; exemplars name the spans."""
    reader = InMemoryMetricReader()
    session, path = recorded(tmp_path, MeterProvider(metric_readers=[reader]))
    data = reader.get_metrics_data()
    run = run_id_of(path)
    tid = trace_id(session.id, run)
    tokens = {
        p.attributes["gen_ai.token.type"]: p for p in points(data, "gen_ai.client.token.usage")
    }
    assert {k: p.sum for k, p in tokens.items()} == {"input": 1200, "output": 300}
    assert dict(tokens["input"].attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.response.model": "gpt-test-2026",
        "gen_ai.token.type": "input",
    }
    (duration,) = points(data, "gen_ai.client.operation.duration")
    assert duration.sum == pytest.approx(3.0)
    (ttfc,) = points(data, "gen_ai.client.operation.time_to_first_chunk")
    assert ttfc.sum == pytest.approx(0.25)
    (tool,) = points(data, "gen_ai.execute_tool.duration")
    assert tool.sum == pytest.approx(0.5)
    assert tool.attributes["error.type"] == "TimeoutError"
    assert tool.attributes["gen_ai.tool.name"] == "grep"
    # The nested agent (7 s of records) and the run span, whose records are the real clock's.
    (agents,) = points(data, "gen_ai.invoke_agent.duration")
    assert agents.count == 2
    assert agents.sum >= 7.0
    assert agents.attributes["gen_ai.agent.name"] == "coder"
    model_span = span_id(session.id, run, "model_1", 1)
    for point in (duration, ttfc, *tokens.values()):
        assert [(e.trace_id, e.span_id) for e in point.exemplars] == [(tid, model_span)]
    assert [(e.trace_id, e.span_id) for e in tool.exemplars] == [
        (tid, span_id(session.id, run, "call_1", 1))
    ]


def test_latest_conventions_count_cache_and_reasoning_apart(tmp_path: Path) -> None:
    """With the switch at ``latest`` the conventions' counters carry cache and reasoning tokens."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    path = tmp_path / "s.jsonl"
    bridge = SpanBridge(
        captured_spans().processor, file_uri=path, metrics=GenAIMetrics(provider, semconv="latest")
    )
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        scenario(run)
    data = reader.get_metrics_data()
    assert not points(data, "gen_ai.client.token.usage")
    sums = {
        name: sum(p.value for p in points(data, f"gen_ai.client.inference.usage.{name}"))
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_read.input_tokens",
            "cache_write.input_tokens",
            "reasoning.output_tokens",
        )
    }
    assert sums == {
        "input_tokens": 1200,
        "output_tokens": 300,
        "cache_read.input_tokens": 1000,
        "cache_write.input_tokens": 50,
        "reasoning.output_tokens": 40,
    }
    (point,) = points(data, "gen_ai.client.inference.operation.input_tokens")
    assert point.sum == 1200
    assert session.id


def test_the_switch_refuses_unknown_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistyped switch says which values it takes."""
    monkeypatch.setenv("LOOPSCRIBE_GENAI_SEMCONV", "newest")
    with pytest.raises(ValueError, match="current, latest, both"):
        semconv_mode()
    monkeypatch.setenv("LOOPSCRIBE_GENAI_SEMCONV", "Both")
    assert semconv_mode() == "both"


def test_recorded_times_and_values_from_a_file(tmp_path: Path) -> None:
    """``metrics_data`` of a replay stamps points with the recorded minute and the same values."""
    session, path = recorded(tmp_path, MeterProvider())
    spans = replayed(path)
    data = metrics_data(spans)
    (duration,) = points(data, "gen_ai.client.operation.duration")
    minute = int(T0.timestamp()) * 10**9
    assert (duration.start_time_unix_nano, duration.time_unix_nano) == (minute, minute + 60 * 10**9)
    assert duration.sum == pytest.approx(3.0)
    assert duration.count == 1
    run = run_id_of(path)
    assert [(e.trace_id, e.span_id) for e in duration.exemplars] == [
        (trace_id(session.id, run), span_id(session.id, run, "model_1", 1))
    ]
    tokens = {
        p.attributes["gen_ai.token.type"]: p.sum for p in points(data, "gen_ai.client.token.usage")
    }
    assert tokens == {"input": 1200, "output": 300}


def replayed(path: Path) -> list[ReadableSpan]:
    """The spans replay emits for ``path``."""
    captured = captured_spans()
    replay(path, captured.processor)
    return list(captured.spans)


def test_an_imported_transcript_gives_its_usage(tmp_path: Path) -> None:
    """A Claude Code transcript's metrics add up to the usage its import counted."""
    report = import_transcript(DATA / "tool_heavy.jsonl", tmp_path / "out", finished=True)
    spans = replayed(report.destination)
    data = metrics_data(spans)
    tokens: dict[str, int] = {}
    for p in points(data, "gen_ai.client.token.usage"):
        key = str(p.attributes["gen_ai.token.type"])
        tokens[key] = tokens.get(key, 0) + int(p.sum)
    assert tokens == {"input": report.input_tokens, "output": report.output_tokens}
    assert tokens["input"] > 0
    calls = sum(p.count for p in points(data, "gen_ai.client.operation.duration"))
    assert calls == report.model_calls
    exemplar_spans = {
        e.span_id for p in points(data, "gen_ai.client.operation.duration") for e in p.exemplars
    }
    chat_spans = {s.context.span_id for s in spans if s.name.startswith("chat")}
    assert exemplar_spans
    assert exemplar_spans <= chat_spans


# -- over a real socket ---------------------------------------------------------------


@contextlib.contextmanager
def metrics_receiver() -> Iterator[tuple[str, list[Any], threading.Event]]:
    """An OTLP/HTTP receiver on 127.0.0.1: keeps metric requests, accepts traces."""
    received: list[Any] = []
    arrived = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/v1/metrics":
                received.append(metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
                arrived.set()
            elif self.path != "/v1/traces":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received, arrived
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_default_bridge_sends_metrics_over_otlp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an endpoint set, the default bridge's metrics reach the receiver with exemplars."""
    with metrics_receiver() as (endpoint, received, arrived):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        path = tmp_path / "s.jsonl"
        bridge = SpanBridge()
        with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
            scenario(run)
        bridge.shutdown()
        assert arrived.wait(10)
    metrics = {
        m.name: m
        for request in received
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert "gen_ai.client.token.usage" in metrics
    usage = {
        next(a.value.string_value for a in p.attributes if a.key == "gen_ai.token.type"): p
        for p in metrics["gen_ai.client.token.usage"].histogram.data_points
    }
    assert {k: p.sum for k, p in usage.items()} == {"input": 1200, "output": 300}
    rid = run_id_of(path)
    exemplar = usage["input"].exemplars[0]
    assert exemplar.trace_id == trace_id(session.id, rid).to_bytes(16, "big")
    assert exemplar.span_id == span_id(session.id, rid, "model_1", 1).to_bytes(8, "big")
    (duration,) = metrics["gen_ai.client.operation.duration"].histogram.data_points
    assert duration.sum == pytest.approx(3.0)


def test_default_bridge_writes_metrics_beside_the_session(tmp_path: Path) -> None:
    """Without an endpoint the default bridge writes OTLP JSON metric lines beside the file."""
    import orjson

    path = tmp_path / "s.jsonl"
    bridge = SpanBridge()
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        scenario(run)
    bridge.shutdown()
    lines = (tmp_path / "s.jsonl.metrics.otlp.jsonl").read_bytes().splitlines()
    names = {
        m["name"]
        for line in lines
        for rm in orjson.loads(line)["resourceMetrics"]
        for sm in rm["scopeMetrics"]
        for m in sm["metrics"]
    }
    assert {"gen_ai.client.token.usage", "gen_ai.execute_tool.duration"} <= names
    rid = run_id_of(path)
    text = b"".join(lines).decode()
    assert f'"spanId":"{span_id(session.id, rid, "model_1", 1):016x}"' in text


def test_export_metrics_sends_an_imported_session_at_its_recorded_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export --metrics`` sends a transcript's usage, stamped with its recorded minutes."""
    from loopscribe.cli import main

    report = import_transcript(DATA / "tool_heavy.jsonl", tmp_path / "out", finished=True)
    times = [r.ts for r in read(report.destination) if r.type == "model_exec_end"]
    with metrics_receiver() as (endpoint, received, arrived):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        assert main(["--json", "export", "--metrics", str(report.destination)]) == 0
        assert arrived.wait(10)
    usage = [
        p
        for request in received
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "gen_ai.client.token.usage"
        for p in m.histogram.data_points
    ]
    assert sum(p.sum for p in usage) == report.input_tokens + report.output_tokens
    first = min(int(t.timestamp()) // 60 * 60 * 10**9 for t in times)
    assert min(p.start_time_unix_nano for p in usage) == first
    assert all(p.time_unix_nano - p.start_time_unix_nano == 60 * 10**9 for p in usage)
    assert all(p.exemplars for p in usage)


def test_hostile_attribute_values_never_break_the_aggregation() -> None:
    """Usage attributes that are not counts are left out of the measurements, never raise."""
    from opentelemetry.trace import SpanContext, TraceFlags

    from loopscribe.otel import MetricsAggregator

    def chat(span_number: int, tokens: object) -> ReadableSpan:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": tokens,
            "gen_ai.usage.output_tokens": 5,
        }
        context = SpanContext(7, span_number, False, TraceFlags(1))
        return ReadableSpan("chat m", context, attributes=attrs, start_time=0, end_time=10**9)

    aggregator = MetricsAggregator()
    for number, tokens in enumerate([100, "100", -3, 2**70, None, 1.5, 200], start=1):
        aggregator.record(chat(number, tokens))
    data = MetricsData([])
    assert not data.resource_metrics
    metrics: dict[str, Any] = {m.name: m for m in aggregator.metrics(0, 1)}
    points = {
        p.attributes["gen_ai.token.type"]: p
        for p in metrics["gen_ai.client.token.usage"].data.data_points
    }
    assert points["input"].sum == 300  # only the real counts
    assert points["output"].sum == 35  # every span gave 5
    assert sum(p.count for p in metrics["gen_ai.client.operation.duration"].data.data_points) == 7
    assert aggregator.failed_spans == 0


def test_metrics_read_at_any_moment_count_every_span_measured_before() -> None:
    """Spans are added up in batches, yet a read (the periodic export, a flush) misses
    none, while another thread keeps measuring and reading."""
    import threading

    from opentelemetry.trace import SpanContext, TraceFlags

    from loopscribe.otel import MetricsAggregator

    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "m",
        "gen_ai.usage.input_tokens": 3,
        "gen_ai.usage.output_tokens": 5,
    }

    def calls(aggregator: MetricsAggregator) -> int:
        metrics: dict[str, Any] = {m.name: m for m in aggregator.metrics(0, 1)}
        duration = metrics.get("gen_ai.client.operation.duration")
        return sum(int(p.count) for p in duration.data.data_points) if duration else 0

    aggregator = MetricsAggregator()
    for number in range(1, 150):
        context = SpanContext(7, number, False, TraceFlags(1))
        aggregator.record(
            ReadableSpan("chat m", context, attributes=attrs, start_time=0, end_time=1)
        )
        if number in (1, 63, 64, 65, 149):
            assert calls(aggregator) == number
    stop = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            seen.append(calls(aggregator))

    thread = threading.Thread(target=reader)
    thread.start()
    for number in range(150, 2000):
        aggregator.measure(attrs, 0, 1, 7, number)
    stop.set()
    thread.join()
    assert calls(aggregator) == 1999
    assert seen == sorted(seen)  # never a count going back
    assert aggregator.failed_spans == 0

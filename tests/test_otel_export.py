"""default_processor on the wire: real OTLP exporters, a local receiver, the JSON-lines default."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from loopscribe import AssistantMessage, Execution, Run, Session, Usage, UserMessage, read
from loopscribe import events as ev
from loopscribe.otel import (
    OTLPJsonFileExporter,
    SpanBridge,
    default_export_path,
    default_exporter,
    default_processor,
    run_span_id,
    span_id,
    trace_id,
)
from loopscribe.otel._export import describe_destination
from loopscribe.testing import captured_spans

from .otlp_receiver import Received, closed_port, grpc_receiver, http_receiver

EXPORT_TIMEOUT_S = 1.0


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTLP or batch-processor variable from the outer environment leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("OTEL_EXPORTER_OTLP_", "OTEL_BSP_")):
            monkeypatch.delenv(name)


def small_run(run: Run) -> None:
    """A turn with a model call and a tool call, 1 ms apart."""
    now = datetime.now(UTC)

    def at(step: int) -> datetime:
        return now + timedelta(milliseconds=step)

    turn = Execution("turn_1", "turn")
    model = Execution("model_1", "model", parent_id="turn_1")
    tool = Execution("call_1", "tool", parent_id="turn_1")
    run.record(ev.turn_start(turn, 1, timestamp=at(1)))
    run.record(ev.model_exec_start(model, "gpt-test", provider="openai", timestamp=at(2)))
    run.record(ev.model_request(model, [UserMessage("hello")], timestamp=at(3)))
    message = AssistantMessage(model="gpt-test", usage=Usage(5, 2), stop_reason="stop")
    run.record(ev.model_exec_end(model, message=message, timestamp=at(4)))
    run.record(ev.tool_exec_start(tool, "grep", {"pattern": "x"}, timestamp=at(5)))
    run.record(ev.tool_exec_end(tool, "grep", "no match", timestamp=at(6)))
    run.record(ev.turn_end(turn, 1, timestamp=at(7)))


def expected_ids(session_id: str, run_id: str) -> set[tuple[str, str]]:
    """The (trace, span) hex pairs the derivation gives for ``small_run``."""
    tid = f"{trace_id(session_id, run_id):032x}"
    spans = [run_span_id(session_id, run_id)] + [
        span_id(session_id, run_id, ex, 1) for ex in ("turn_1", "model_1", "call_1")
    ]
    return {(tid, f"{sid:016x}") for sid in spans}


def record_with(path: Path, processor: Any) -> tuple[str, str]:
    """Record ``small_run`` through a SpanBridge on ``processor``; return (session_id, run_id)."""
    bridge = SpanBridge(processor, file_uri=path)
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        small_run(run)
    return session.id, run.id


def received_ids(received: Received) -> set[tuple[str, str]]:
    """The (trace, span) hex pairs a receiver got."""
    return {(s.trace_id.hex(), s.span_id.hex()) for s in received.spans()}


def test_embedded_default_writes_otlp_json_lines(session_path: Path) -> None:
    """With no endpoint set, spans go to OTLP JSON lines beside the session, with hex IDs."""
    processor = default_processor(session_path)
    session_id, run_id = record_with(session_path, processor)
    processor.shutdown()
    export = default_export_path(session_path)
    assert export == session_path.with_name("session.jsonl.otlp.jsonl")
    lines = export.read_bytes().splitlines()
    assert lines
    spans = []
    for line in lines:
        request = orjson.loads(line)
        assert set(request) == {"resourceSpans"}
        for resource_spans in request["resourceSpans"]:
            assert {"resource", "scopeSpans"} <= set(resource_spans)
            for scope_spans in resource_spans["scopeSpans"]:
                assert scope_spans["scope"]["name"] == "loopscribe"
                spans.extend(scope_spans["spans"])
    assert {(s["traceId"], s["spanId"]) for s in spans} == expected_ids(session_id, run_id)
    chat = next(s for s in spans if s["name"] == "chat gpt-test")
    assert chat["kind"] == 3  # SPAN_KIND_CLIENT, as an integer
    assert chat["parentSpanId"] == f"{span_id(session_id, run_id, 'turn_1', 1):016x}"
    assert int(chat["startTimeUnixNano"]) < int(chat["endTimeUnixNano"])
    attrs = {a["key"]: a["value"] for a in chat["attributes"]}
    assert attrs["gen_ai.request.model"] == {"stringValue": "gpt-test"}
    assert attrs["gen_ai.conversation.id"] == {"stringValue": session_id}
    assert int(attrs["gen_ai.usage.input_tokens"]["intValue"]) == 5


def test_export_path_can_be_chosen(session_path: Path, tmp_path: Path) -> None:
    """export_path overrides where the embedded default writes."""
    target = tmp_path / "elsewhere.jsonl"
    processor = default_processor(session_path, export_path=target)
    record_with(session_path, processor)
    processor.shutdown()
    assert target.stat().st_size > 0
    assert not default_export_path(session_path).exists()


def test_file_exporter_appends_one_line_per_export_until_shutdown(
    session_path: Path, tmp_path: Path
) -> None:
    """Each export appends one request line; after shutdown exports fail and write nothing."""
    captured = captured_spans()
    record_with(session_path, captured.processor)
    target = tmp_path / "x.otlp.jsonl"
    exporter = OTLPJsonFileExporter(target)
    assert exporter.export(captured.spans) is SpanExportResult.SUCCESS
    assert exporter.export(captured.spans[:1]) is SpanExportResult.SUCCESS
    assert exporter.force_flush()
    exporter.shutdown()
    assert exporter.export(captured.spans) is SpanExportResult.FAILURE
    lines = target.read_bytes().splitlines()
    assert [
        len(orjson.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for line in lines
    ] == [4, 1]
    assert target.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("protocol", "variable"),
    [
        ("grpc", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ("grpc", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ("http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ("http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ],
)
def test_otlp_wire_export(
    session_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    protocol: str,
    variable: str,
) -> None:
    """The real OTLP exporter delivers spans with the derived IDs and the configured headers."""
    secret = f"secret-{uuid.uuid4().hex}"
    receiver = grpc_receiver() if protocol == "grpc" else http_receiver()
    with receiver as received, caplog.at_level(logging.DEBUG):
        endpoint = received.endpoint
        if variable.endswith("TRACES_ENDPOINT") and protocol != "grpc":
            endpoint += "/v1/traces"  # the signal-specific URL is used as given
        monkeypatch.setenv(variable, endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-loopscribe-token={secret}")
        processor = default_processor(session_path)
        session_id, run_id = record_with(session_path, processor)
        processor.shutdown()
        assert received_ids(received) == expected_ids(session_id, run_id)
        assert all(h.get("x-loopscribe-token") == secret for h in received.headers)
    assert secret not in caplog.text
    assert not default_export_path(session_path).exists()


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_collector_down_costs_a_bounded_shutdown(
    session_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    protocol: str,
) -> None:
    """With nothing listening, recording succeeds and close plus shutdown take about the timeout."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(EXPORT_TIMEOUT_S))
    processor = default_processor(session_path)
    bridge = SpanBridge(processor, file_uri=session_path)
    session = Session.create(session_path, observers=[bridge])
    started = time.monotonic()
    with session.begin_run() as run:
        small_run(run)
    recorded = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="loopscribe.otel"):
        session.close()
        processor.shutdown()
    finished = time.monotonic()
    assert recorded - started < EXPORT_TIMEOUT_S  # recording never waited on export
    assert finished - recorded < EXPORT_TIMEOUT_S + 1.0
    assert "4 of 4 spans were not exported" in caplog.text
    assert bridge.spans_emitted == 4
    assert [r.type for r in read(session_path)][-1] == "run_close"


def test_unsupported_protocol_is_a_clear_error(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OTLP protocol the Python exporters lack is refused at setup, naming the choices."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="'grpc' and 'http/protobuf'"):
        default_processor(session_path)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "OTLP JSON lines file://"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://user:pw-secret@collector:4317?k=q-secret",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "OTLP/gRPC http://collector:4317",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318/"},
            "OTLP/HTTP https://collector:4318/v1/traces",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "https://ignored:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://[::1]:9999/custom/path",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            "OTLP/HTTP http://[::1]:9999/custom/path",
        ),
    ],
)
def test_describe_destination_names_no_secret(
    session_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    """The destination description follows the variables and drops credentials from URLs."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    description = describe_destination(session_path)
    assert description.startswith(expected)
    assert "secret" not in description
    exporter = default_exporter(session_path, export_timeout_millis=100)
    try:
        assert isinstance(exporter, OTLPJsonFileExporter) == (not env)
    finally:
        exporter.shutdown()


def test_bad_timeout_falls_back_to_the_default(
    session_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A timeout that is not a positive number of seconds is reported and replaced by 10 s."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")
    with caplog.at_level(logging.WARNING, logger="loopscribe.otel"):
        processor = default_processor(session_path)
    processor.shutdown()
    assert "not a positive number of seconds" in caplog.text


@pytest.fixture
def clean_subprocess_env() -> dict[str, str]:
    """The environment for a child interpreter, without OTLP settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def test_importing_otel_loads_no_exporter(clean_subprocess_env: dict[str, str]) -> None:
    """`import loopscribe.otel` loads no OTLP exporter, grpc or protobuf before export is set up."""
    code = (
        "import sys, loopscribe.otel, loopscribe.testing; "
        "print(sorted(m for m in sys.modules if m.startswith"
        "(('opentelemetry.exporter', 'grpc', 'google.protobuf', 'opentelemetry.proto'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=clean_subprocess_env,
    )
    assert out.stdout.strip() == "[]"

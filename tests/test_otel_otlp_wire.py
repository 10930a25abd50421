"""loopscribe's OTLP exporters on the wire: the SDK's request, encoded by loopscribe.

The exporters ``default_exporter`` makes for ``http/protobuf`` and ``grpc``
send :func:`encode_otlp_protobuf`'s bytes through the SDK's own clients. A
receiver on 127.0.0.1 must get exactly what the SDK's encoder makes of the
same spans, compressed or not; the SDK's behaviour around the encoding
(shutdown, request size limit, failures, internal metrics) must stay.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc import trace_exporter as sdk_grpc
from opentelemetry.exporter.otlp.proto.http import trace_exporter as sdk_http
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind
from opentelemetry.trace.status import Status, StatusCode

from loopscribe.importers import claude_code
from loopscribe.otel import _http_exporter, default_exporter, encode_otlp_json, encode_otlp_protobuf
from loopscribe.otel._grpc_exporter import GrpcSpanExporter
from loopscribe.otel._http_exporter import HttpSpanExporter

from .importers._support import DATA
from .importers._support import spans as replayed_spans
from .otlp_receiver import Received, grpc_receiver, http_receiver


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTLP variable from the outer environment leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("OTEL_EXPORTER_OTLP_", "OTEL_PYTHON_")):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def bridge_spans(tmp_path_factory: pytest.TempPathFactory) -> list[ReadableSpan]:
    """The replayed spans of a real transcript's import."""
    folder = tmp_path_factory.mktemp("imported")
    claude_code.import_transcript(DATA / "claude-code" / "tool_heavy.jsonl", folder, finished=True)
    found = [span for path in sorted(folder.glob("*.jsonl")) for span in replayed_spans(path)]
    assert len(found) > 10
    return found


def host_spans() -> list[ReadableSpan]:
    """Spans of two Resources and scopes with every value kind, events, links and statuses."""
    resources = [
        Resource({"service.name": "host", "ünï": "✓"}, "https://opentelemetry.io/schemas/1.30.0"),
        Resource({"service.name": "worker", "n": -7}),
    ]
    scopes = [InstrumentationScope("host.app", "2.1", None, {"a": 1}), InstrumentationScope("x")]
    remote = SpanContext(0xABC, 0xDEF, is_remote=True)
    return [
        ReadableSpan(
            f"span {n}",
            context=SpanContext(0x1234 + n, 0x99 + n, is_remote=False),
            parent=remote if n % 2 else None,
            resource=resources[n % 2],
            instrumentation_scope=scopes[n % 3 % 2],
            attributes={
                "s": "ünïcødé",
                "b": n % 2 == 0,
                "i": -(1 << 63) + n,
                "f": -0.0 if n else float("nan"),
                "bytes": b"\x00\xff",
                "seq": ("a", None, 3),
                "map": {"k": [1.5, {"deep": b"x"}]},
                "bad": "\ud800",  # left out by both encoders
            },
            events=[Event("e", {"k": n}, 10 + n)],
            links=[Link(remote, {"l": True})],
            kind=list(SpanKind)[n % 5],
            status=Status(StatusCode.ERROR, "boom") if n % 3 == 0 else Status(StatusCode.OK),
            start_time=1_700_000_000_000_000_000 + n,
            end_time=1_700_000_000_000_000_100 + n,
        )
        for n in range(12)
    ]


def sdk_request(spans: list[ReadableSpan]) -> Any:
    """The SDK's request for ``spans``."""
    return encode_spans(spans)


@pytest.fixture
def sdk_encoder_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the SDK exporters' own encoder fail: an export that still works did not use it."""

    def refuse(spans: Any) -> Any:
        raise AssertionError("the SDK's encode_spans was called")

    monkeypatch.setattr(sdk_http, "encode_spans", refuse)
    monkeypatch.setattr(sdk_grpc, "encode_spans", refuse)


@pytest.mark.usefixtures("quiet_encoders", "sdk_encoder_unused")
@pytest.mark.parametrize("compression", ["none", "gzip", "deflate"])
@pytest.mark.parametrize("source", ["bridge", "host"])
def test_http_protobuf_sends_the_sdks_bytes(
    monkeypatch: pytest.MonkeyPatch,
    bridge_spans: list[ReadableSpan],
    compression: str,
    source: str,
    tmp_path: Path,
) -> None:
    """The default exporter for http/protobuf: the body is the SDK's request, byte for byte."""
    spans = bridge_spans if source == "bridge" else host_spans()
    with http_receiver() as received:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", received.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
        exporter = default_exporter(tmp_path / "s.jsonl", export_timeout_millis=5000)
        assert isinstance(exporter, HttpSpanExporter)
        assert exporter.encodes_spans_itself  # the installed SDK has the layout we know
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    bodies, headers = received.snapshot()
    assert bodies == [sdk_request(spans).SerializeToString()]
    assert headers[0].get("content-encoding", "none") == (
        compression if compression != "none" else "none"
    )


@pytest.mark.usefixtures("quiet_encoders", "sdk_encoder_unused")
@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("source", ["bridge", "host"])
def test_grpc_sends_the_sdks_request(
    monkeypatch: pytest.MonkeyPatch,
    bridge_spans: list[ReadableSpan],
    compression: str,
    source: str,
    tmp_path: Path,
) -> None:
    """The default exporter for grpc: the receiver decodes exactly the SDK's request."""
    spans = bridge_spans if source == "bridge" else host_spans()
    with grpc_receiver() as received:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", received.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        if compression != "none":  # the gRPC exporter takes only gzip and deflate here
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
        exporter = default_exporter(tmp_path / "s.jsonl", export_timeout_millis=5000)
        assert isinstance(exporter, GrpcSpanExporter)
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert len(received.requests) == 1
    request = received.requests[0]
    assert request == sdk_request(spans)
    assert request.SerializeToString() == encode_otlp_protobuf(spans)


def test_the_installed_sdk_export_is_one_that_is_mirrored() -> None:
    """A new SDK ``export`` fails here (and gets the SDK's own ``export`` at run time).

    Compare it with ``HttpSpanExporter.export``, mend that, then add the digest.
    """
    digest = _http_exporter.export_digest()
    assert digest in _http_exporter.MIRRORED_EXPORTS, (
        f"the SDK's OTLP/HTTP export changed (digest {digest}): check that "
        "loopscribe.otel._http_exporter.HttpSpanExporter.export still does what it does"
    )


def test_an_sdk_export_not_mirrored_gets_the_sdks_own_export(
    monkeypatch: pytest.MonkeyPatch, bridge_spans: list[ReadableSpan]
) -> None:
    """An SDK whose ``export`` differs from the mirrored ones is used as it is."""
    monkeypatch.setattr(_http_exporter, "MIRRORED_EXPORTS", frozenset())
    monkeypatch.setattr(_http_exporter, "_HELPERS", _http_exporter._sdk_helpers())
    with http_receiver() as received:
        exporter = HttpSpanExporter(endpoint=f"{received.endpoint}/v1/traces", timeout=5)
        assert not exporter.encodes_spans_itself
        assert exporter.export(bridge_spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert received.snapshot()[0] == [encode_otlp_protobuf(bridge_spans)]


def test_unknown_exporter_layout_falls_back_to_the_sdks_export(
    monkeypatch: pytest.MonkeyPatch, bridge_spans: list[ReadableSpan]
) -> None:
    """Without the SDK internals it knows, the exporter is the SDK's: slower, nothing lost."""
    calls: list[int] = []
    real = encode_spans

    def counting(spans: Any) -> Any:
        calls.append(len(spans))
        return real(spans)

    monkeypatch.setattr(sdk_http, "encode_spans", counting)
    monkeypatch.setattr(_http_exporter, "_HELPERS", None)
    with http_receiver() as received:
        exporter = HttpSpanExporter(endpoint=f"{received.endpoint}/v1/traces", timeout=5)
        assert not exporter.encodes_spans_itself
        assert exporter.export(bridge_spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert calls == [len(bridge_spans)]
    assert received.snapshot()[0] == [encode_otlp_protobuf(bridge_spans)]


class _Layout(HttpSpanExporter):
    """An exporter made on an SDK that lacks one of the internals the fast path uses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self._max_request_size
        self._fast = self._known_layout()
        self._max_request_size = 0


def test_a_missing_exporter_internal_is_noticed(bridge_spans: list[ReadableSpan]) -> None:
    """The layout check looks at the instance, so a renamed internal turns the fast path off."""
    with http_receiver() as received:
        exporter = _Layout(endpoint=f"{received.endpoint}/v1/traces", timeout=5)
        assert not exporter.encodes_spans_itself
        assert exporter.export(bridge_spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert len(received.snapshot()[0]) == 1


def _metric_points(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[Any, ...]], Any]:
    data = reader.get_metrics_data()
    out: dict[tuple[str, tuple[Any, ...]], Any] = {}
    if data is None:
        return out
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    attrs = tuple(
                        sorted(
                            (k, v)
                            for k, v in (point.attributes or {}).items()
                            if k not in ("otel.component.name", "server.port")
                        )
                    )
                    value = getattr(point, "value", None)
                    if value is None:
                        value = getattr(point, "count", None)
                    out[metric.name, attrs] = value
    return out


def _exports(
    exporter_type: type[Any], endpoint: str, spans: list[ReadableSpan], **options: Any
) -> tuple[list[SpanExportResult], dict[tuple[str, tuple[Any, ...]], Any]]:
    """A success, a failure (wrong path or size) and an export after shutdown; the metrics."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    good = exporter_type(endpoint=f"{endpoint}/v1/traces", timeout=5, meter_provider=meters)
    wrong = exporter_type(endpoint=f"{endpoint}/elsewhere", timeout=5, meter_provider=meters)
    small = exporter_type(
        endpoint=f"{endpoint}/v1/traces", timeout=5, meter_provider=meters, **options
    )
    results = [good.export(spans), wrong.export(spans), small.export(spans)]
    good.shutdown()
    results.append(good.export(spans))
    wrong.shutdown()
    small.shutdown()
    return results, _metric_points(reader)


def test_failures_shutdown_size_limit_and_metrics_are_the_sdks(
    monkeypatch: pytest.MonkeyPatch,
    bridge_spans: list[ReadableSpan],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Same results, same requests and same internal metrics as the SDK's exporter."""
    monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")
    size = len(encode_otlp_protobuf(bridge_spans))
    outcomes = {}
    for exporter_type in (sdk_http.OTLPSpanExporter, HttpSpanExporter):
        with http_receiver() as received, caplog.at_level(logging.WARNING):
            caplog.clear()
            results, metrics = _exports(
                exporter_type, received.endpoint, bridge_spans, max_request_size=size - 1
            )
        outcomes[exporter_type] = (results, metrics, received.snapshot()[0], caplog.text)
    sdk, ours = outcomes[sdk_http.OTLPSpanExporter], outcomes[HttpSpanExporter]
    assert ours[0] == [
        SpanExportResult.SUCCESS,
        SpanExportResult.FAILURE,
        SpanExportResult.FAILURE,
        SpanExportResult.FAILURE,
    ]
    assert ours[0] == sdk[0]
    assert ours[1] == sdk[1]
    assert any("error.type" in dict(attrs) for _, attrs in ours[1])  # failures were counted
    assert ours[2] == sdk[2] == [encode_otlp_protobuf(bridge_spans)]  # only the good one arrived
    assert "exceeds max_request_size" in ours[3]
    assert "already shutdown" in ours[3]


def test_otlp_json_lines_are_unchanged(
    bridge_spans: list[ReadableSpan], quiet_encoders: None
) -> None:
    """The embedded default's JSON line is what MessageToDict makes of the SDK's request."""
    import importlib

    import orjson

    json_format: Any = importlib.import_module("google.protobuf.json_format")
    for spans in (bridge_spans, host_spans()):
        expected = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        line = orjson.loads(encode_otlp_json(spans))
        for resource_spans in expected["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    _hex(span)
        assert line == expected


def _hex(span: dict[str, Any]) -> None:
    import base64

    for key in ("traceId", "spanId", "parentSpanId"):
        if key in span:
            span[key] = base64.b64decode(span[key]).hex()
    for link in span.get("links", ()):
        _hex(link)


def test_received_spans_match_what_was_recorded(
    monkeypatch: pytest.MonkeyPatch, bridge_spans: list[ReadableSpan], tmp_path: Path
) -> None:
    """Through a batch processor (several exports), the receiver gets every span once."""
    from loopscribe.otel import default_processor

    received: Received
    with http_receiver() as received:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", received.endpoint)
        processor = default_processor(
            tmp_path / "s.jsonl", max_export_batch_size=5, schedule_delay_millis=10
        )
        for span in bridge_spans:
            processor.on_end(span)
        processor.shutdown()
    got = [(s.trace_id, s.span_id, s.name) for s in received.spans()]
    want = [
        (s.trace_id, s.span_id, s.name)
        for r in sdk_request(bridge_spans).resource_spans
        for ss in r.scope_spans
        for s in ss.spans
    ]
    assert sorted(got) == sorted(want)
    assert len(received.requests) >= len(bridge_spans) // 5


def test_a_batch_that_cannot_be_encoded_fails_as_with_the_sdk(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A span name no protocol can carry: the export fails, is logged, and sends nothing."""
    spans = [ReadableSpan("bad \ud800 name", context=SpanContext(1, 2, is_remote=False))]
    for exporter_type in (sdk_http.OTLPSpanExporter, HttpSpanExporter):
        with http_receiver() as received, caplog.at_level(logging.ERROR):
            caplog.clear()
            exporter: Any = exporter_type(endpoint=f"{received.endpoint}/v1/traces", timeout=5)
            assert exporter.export(spans) is SpanExportResult.FAILURE
            exporter.shutdown()
        assert received.snapshot()[0] == []
        assert "Failed to encode span batch" in caplog.text

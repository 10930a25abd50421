"""GenAI metrics from the same spans the bridge emits: tokens, latency, tools and agents.

Every measurement is read from a finished span, so the metrics, the spans
and the records agree: a chat span's ``gen_ai.usage.*`` attributes become
``gen_ai.client.token.usage``, its start and end ``gen_ai.client.operation.duration``,
its ``gen_ai.response.time_to_first_chunk`` (streamed calls only)
``gen_ai.client.operation.time_to_first_chunk``; an ``execute_tool`` span
becomes ``gen_ai.execute_tool.duration`` and an ``invoke_agent`` span
``gen_ai.invoke_agent.duration``. Each measurement carries the span's trace
and span IDs as its exemplar's, so a spike on a chart leads to the span and
from there to the records.

Live, :class:`GenAIMetrics` records into a ``MeterProvider`` (the host's,
or :func:`default_meter_provider`); :func:`metrics_data` builds the same
measurements at the recorded times for ``loopscribe export --metrics``.

Names follow what the official instrumentations emit today (util-genai):
token counts as one ``gen_ai.client.token.usage`` histogram split by
``gen_ai.token.type`` (``input``, which includes cache reads and writes,
and ``output``, which includes reasoning, as the conventions define the
span attributes). The conventions' newer token instruments
(``gen_ai.client.inference.usage.*`` counters, one per kind of token, with
cache read, cache write and reasoning apart, and the
``gen_ai.client.inference.operation.*_tokens`` histograms) come with the one
switch :data:`SEMCONV_ENV` (``LOOPSCRIBE_GENAI_SEMCONV``): ``current`` (the
default), ``latest`` (the renamed instruments only) or ``both``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import Exemplar, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan
from opentelemetry.util.types import AttributeValue

from .._files import append_whole, open_append

logger = logging.getLogger("loopscribe.otel")

SEMCONV_ENV: Final = "LOOPSCRIBE_GENAI_SEMCONV"
"""The one switch between today's metric names and the conventions' renames."""

Semconv = Literal["current", "latest", "both"]
_MODES: Final = ("current", "latest", "both")

OTHER_PROVIDER: Final = "_OTHER"
"""``gen_ai.provider.name`` when no provider can be told (the conventions' fallback value)."""

TOKEN_USAGE: Final = "gen_ai.client.token.usage"
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
TOOL_DURATION: Final = "gen_ai.execute_tool.duration"
AGENT_DURATION: Final = "gen_ai.invoke_agent.duration"
USAGE_INPUT: Final = "gen_ai.client.inference.usage.input_tokens"
USAGE_OUTPUT: Final = "gen_ai.client.inference.usage.output_tokens"
USAGE_CACHE_READ: Final = "gen_ai.client.inference.usage.cache_read.input_tokens"
USAGE_CACHE_WRITE: Final = "gen_ai.client.inference.usage.cache_write.input_tokens"
USAGE_REASONING: Final = "gen_ai.client.inference.usage.reasoning.output_tokens"
OPERATION_INPUT: Final = "gen_ai.client.inference.operation.input_tokens"
OPERATION_OUTPUT: Final = "gen_ai.client.inference.operation.output_tokens"

TOKEN_TYPE: Final = "gen_ai.token.type"
TOKEN_MODALITY: Final = "gen_ai.token.modality"

_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
_AGENT_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6,
)  # fmt: skip
_TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Instrument:
    counter: bool
    unit: str
    description: str
    buckets: tuple[float, ...] = ()


INSTRUMENTS: Final[Mapping[str, _Instrument]] = {
    TOKEN_USAGE: _Instrument(
        False, "{token}", "Number of input and output tokens used", _TOKEN_BUCKETS
    ),
    OPERATION_DURATION: _Instrument(False, "s", "GenAI operation duration", _DURATION_BUCKETS),
    TIME_TO_FIRST_CHUNK: _Instrument(
        False, "s", "Time to receive the first chunk of a streamed response", _DURATION_BUCKETS
    ),
    TOOL_DURATION: _Instrument(False, "s", "Duration of a tool execution", _DURATION_BUCKETS),
    AGENT_DURATION: _Instrument(False, "s", "Duration of an agent invocation", _AGENT_BUCKETS),
    USAGE_INPUT: _Instrument(True, "{token}", "Input tokens used, cached ones included"),
    USAGE_OUTPUT: _Instrument(True, "{token}", "Output tokens used, reasoning included"),
    USAGE_CACHE_READ: _Instrument(True, "{token}", "Input tokens read from a provider cache"),
    USAGE_CACHE_WRITE: _Instrument(True, "{token}", "Input tokens written to a provider cache"),
    USAGE_REASONING: _Instrument(True, "{token}", "Output tokens spent on reasoning"),
    OPERATION_INPUT: _Instrument(
        False, "{token}", "Input tokens of one inference operation", _TOKEN_BUCKETS
    ),
    OPERATION_OUTPUT: _Instrument(
        False, "{token}", "Output tokens of one inference operation", _TOKEN_BUCKETS
    ),
}
"""Every instrument loopscribe records, by name."""

_INFERENCE: Final = frozenset({"chat", "text_completion", "generate_content", "embeddings"})
_CHAT_LABELS: Final = (
    "gen_ai.request.model",
    "gen_ai.response.model",
    "server.address",
    "server.port",
    "error.type",
)
_TOOL_LABELS: Final = ("gen_ai.tool.name", "gen_ai.tool.type", "error.type")
_AGENT_LABELS: Final = (
    "gen_ai.agent.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "error.type",
)
CACHE_WRITE_ATTRIBUTES: Final = (
    "gen_ai.usage.cache_write.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens",
)
"""The span attribute for cache writes, by the conventions' name and the one it replaced."""


def semconv_mode(value: str | None = None) -> Semconv:
    """The metric naming in force: ``value``, else :data:`SEMCONV_ENV`, else ``current``.

    Raises:
        ValueError: The value is not ``current``, ``latest`` or ``both``.
    """
    raw = (value if value is not None else os.environ.get(SEMCONV_ENV) or "current").strip()
    mode = raw.lower()
    if mode == "current":
        return "current"
    if mode == "latest":
        return "latest"
    if mode == "both":
        return "both"
    raise ValueError(
        f"{SEMCONV_ENV}={raw!r} is not one of {', '.join(_MODES)}: 'current' emits the names "
        "official instrumentations emit today, 'latest' the conventions' renames, 'both' both"
    )


@dataclass(frozen=True, slots=True)
class Measurement:
    """One value for one instrument, with the span it came from."""

    instrument: str
    value: int | float
    attributes: Mapping[str, AttributeValue]
    time_ns: int
    trace_id: int
    span_id: int


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _labels(attrs: Mapping[str, Any], keys: Iterable[str], base: dict[str, AttributeValue]) -> None:
    for key in keys:
        value = attrs.get(key)
        if value is not None:
            base[key] = value


def span_measurements(span: ReadableSpan, mode: Semconv = "current") -> list[Measurement]:
    """The measurements a finished span gives; none for a span of no GenAI operation."""
    attrs = span.attributes or {}
    operation = attrs.get("gen_ai.operation.name")
    context = span.context
    start, end = span.start_time, span.end_time
    if not isinstance(operation, str) or context is None or start is None or end is None:
        return []
    duration_s = max(0, end - start) / 1e9
    trace_id, span_id = context.trace_id, context.span_id
    found: list[Measurement] = []

    def add(name: str, value: float, labels: Mapping[str, AttributeValue]) -> None:
        found.append(Measurement(name, value, labels, end, trace_id, span_id))

    labels: dict[str, AttributeValue] = {"gen_ai.operation.name": operation}
    if operation in _INFERENCE:
        provider = attrs.get("gen_ai.provider.name")
        labels["gen_ai.provider.name"] = provider if isinstance(provider, str) else OTHER_PROVIDER
        _labels(attrs, _CHAT_LABELS, labels)
        add(OPERATION_DURATION, duration_s, labels)
        ttfc = attrs.get("gen_ai.response.time_to_first_chunk")
        if isinstance(ttfc, int | float) and not isinstance(ttfc, bool):
            add(TIME_TO_FIRST_CHUNK, float(ttfc), labels)
        _token_measurements(attrs, labels, mode, add)
    elif operation == "execute_tool":
        _labels(attrs, _TOOL_LABELS, labels)
        add(TOOL_DURATION, duration_s, labels)
    elif operation == "invoke_agent":
        _labels(attrs, _AGENT_LABELS, labels)
        add(AGENT_DURATION, duration_s, labels)
    return found


def _token_measurements(
    attrs: Mapping[str, Any],
    labels: dict[str, AttributeValue],
    mode: Semconv,
    add: Any,
) -> None:
    input_tokens = _int(attrs.get("gen_ai.usage.input_tokens"))
    output_tokens = _int(attrs.get("gen_ai.usage.output_tokens"))
    error = "error.type" in labels
    if mode != "latest":
        # The histogram is recorded only for counts the provider gave (as util-genai does).
        if input_tokens is not None:
            add(TOKEN_USAGE, input_tokens, {**labels, TOKEN_TYPE: "input"})
        if output_tokens is not None:
            add(TOKEN_USAGE, output_tokens, {**labels, TOKEN_TYPE: "output"})
    if mode == "current":
        return
    # The conventions' counters: recorded for every operation, failed ones too,
    # 0 with modality "unknown" when no usage came back.
    counted = {k: v for k, v in labels.items() if k != "error.type"} if error else labels
    counted = {**counted, TOKEN_MODALITY: "unknown"}
    add(USAGE_INPUT, input_tokens or 0, counted)
    add(USAGE_OUTPUT, output_tokens or 0, counted)
    cache_read = _int(attrs.get("gen_ai.usage.cache_read.input_tokens"))
    if cache_read:
        add(USAGE_CACHE_READ, cache_read, counted)
    cache_write = next(
        (n for n in (_int(attrs.get(k)) for k in CACHE_WRITE_ATTRIBUTES) if n is not None), None
    )
    if cache_write:
        add(USAGE_CACHE_WRITE, cache_write, counted)
    reasoning = _int(attrs.get("gen_ai.usage.reasoning.output_tokens"))
    if reasoning:
        add(USAGE_REASONING, reasoning, counted)
    if input_tokens is not None:
        add(OPERATION_INPUT, input_tokens, labels)
    if output_tokens is not None:
        add(OPERATION_OUTPUT, output_tokens, labels)


class GenAIMetrics:
    """Records the GenAI metrics of finished spans into a ``MeterProvider``.

    The :class:`~loopscribe.otel.SpanBridge` calls :meth:`record` for every
    span it emits; it can also be fed spans by hand. Each measurement is
    recorded in the context of its span, so an exemplar-sampling provider
    (the SDK's default, ``trace_based``) keeps the span's trace and span IDs.

    Args:
        meter_provider: Where the instruments live; default: the global one.
        semconv: ``current``, ``latest`` or ``both``; default :data:`SEMCONV_ENV`.
        owned: Shut ``meter_provider`` down with :meth:`shutdown` (it was made for this).

    Raises:
        ValueError: ``semconv`` is not a known value.
    """

    def __init__(
        self,
        meter_provider: metrics_api.MeterProvider | None = None,
        *,
        semconv: str | None = None,
        owned: bool = False,
    ) -> None:
        self.mode: Semconv = semconv_mode(semconv)
        self.meter_provider = meter_provider or metrics_api.get_meter_provider()
        self._owned = owned
        self._meter = self.meter_provider.get_meter("loopscribe", _version())
        self._instruments: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.failed_spans = 0
        """Spans whose measurements could not be recorded (each was logged)."""

    def _instrument(self, name: str) -> Any:
        instrument = self._instruments.get(name)
        if instrument is None:
            with self._lock:
                instrument = self._instruments.get(name)
                if instrument is None:
                    spec = INSTRUMENTS[name]
                    if spec.counter:
                        instrument = self._meter.create_counter(
                            name, unit=spec.unit, description=spec.description
                        )
                    else:
                        instrument = self._meter.create_histogram(
                            name,
                            unit=spec.unit,
                            description=spec.description,
                            explicit_bucket_boundaries_advisory=list(spec.buckets),
                        )
                    self._instruments[name] = instrument
        return instrument

    def record(self, span: ReadableSpan) -> None:
        """Record the measurements of one finished span; never raises."""
        try:
            found = span_measurements(span, self.mode)
            if not found:
                return
            context = _span_context(span)
            for m in found:
                instrument = self._instrument(m.instrument)
                if INSTRUMENTS[m.instrument].counter:
                    instrument.add(m.value, m.attributes, context=context)
                else:
                    instrument.record(m.value, m.attributes, context=context)
        except Exception:
            self.failed_spans += 1
            logger.exception("loopscribe could not record the metrics of span %r", span.name)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what an owned provider holds; a host's provider is left to the host."""
        provider = self.meter_provider
        if self._owned and isinstance(provider, MeterProvider):
            return provider.force_flush(timeout_millis)
        return True

    def shutdown(self) -> None:
        """Flush and stop an owned provider; a host's provider is left to the host."""
        provider = self.meter_provider
        if self._owned and isinstance(provider, MeterProvider):
            self._owned = False
            provider.shutdown()


def _span_context(span: ReadableSpan) -> Context | None:
    sc = span.context
    if sc is None:
        return None
    return trace_api.set_span_in_context(NonRecordingSpan(sc))


def _version() -> str:
    from ._bridge import _scope

    return _scope().version or ""


def host_meter_provider() -> MeterProvider | None:
    """The global MeterProvider when the host configured an SDK one, else ``None``."""
    provider = metrics_api.get_meter_provider()
    return provider if isinstance(provider, MeterProvider) else None


# -- exporters ---------------------------------------------------------------------

METRICS_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
METRICS_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"


def default_metrics_path(session_path: str | os.PathLike[str]) -> Path:
    """Where the embedded default writes metrics: ``s.jsonl.metrics.otlp.jsonl`` for ``s.jsonl``."""
    path = Path(session_path)
    return path.with_name(path.name + ".metrics.otlp.jsonl")


class OTLPJsonFileMetricExporter(MetricExporter):
    """A MetricExporter that appends one ``ExportMetricsServiceRequest`` per line (OTLP/JSON).

    Like :class:`~loopscribe.otel.OTLPJsonFileExporter` for spans: whole lines
    under the file's lock, created 0600, readable by a Collector's
    ``otlpjsonfile`` receiver.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        preferred_temporality: dict[type, AggregationTemporality] | None = None,
    ) -> None:
        super().__init__(preferred_temporality=preferred_temporality)
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Append ``metrics_data`` as one line; never raises."""
        try:
            line = encode_metrics_json(metrics_data)
        except Exception:
            logger.exception("could not encode metrics as OTLP JSON")
            return MetricExportResult.FAILURE
        if line is None:
            return MetricExportResult.SUCCESS
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = open_append(self.path)
                append_whole(self._fd, line, self.path)
            except OSError:
                logger.exception("could not write metrics to %s", self.path)
                return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Every export is written before it returns."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Close the file."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def encode_metrics_json(metrics_data: MetricsData) -> bytes | None:
    """One OTLP/JSON ``ExportMetricsServiceRequest`` line (IDs in hex), or ``None`` if empty."""
    import orjson
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

    request = encode_metrics(metrics_data)
    if not request.resource_metrics:
        return None
    body = MessageToDict(request)
    _hex_ids(body)
    return orjson.dumps(body) + b"\n"


def _hex_ids(node: Any) -> None:
    """OTLP/JSON writes trace and span IDs in hex, where protobuf's JSON mapping uses base64."""
    import base64

    if isinstance(node, dict):
        for key in ("traceId", "spanId"):
            value = node.get(key)
            if isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
        for value in node.values():
            _hex_ids(value)
    elif isinstance(node, list):
        for value in node:
            _hex_ids(value)


def _metrics_protocol() -> str:
    raw = os.environ.get(METRICS_PROTOCOL) or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    protocol = (raw or "http/protobuf").strip().lower()
    if protocol not in ("grpc", "http/protobuf"):
        raise ValueError(
            f"{METRICS_PROTOCOL} / OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}; loopscribe "
            "supports 'grpc' and 'http/protobuf' for metrics"
        )
    return protocol


def default_metric_exporter(
    session_path: str | os.PathLike[str],
    *,
    temporality: AggregationTemporality | None = None,
) -> MetricExporter:
    """OTLP when an endpoint is configured (``OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT``), else a file.

    The file is :func:`default_metrics_path` beside the session.

    Raises:
        ValueError: The configured protocol is not supported.
    """
    preferred: dict[type, AggregationTemporality] | None = None
    if temporality is not None:
        from opentelemetry.sdk.metrics import Counter
        from opentelemetry.sdk.metrics import Histogram as HistogramInstrument

        preferred = {Counter: temporality, HistogramInstrument: temporality}
    if os.environ.get(METRICS_ENDPOINT) or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from .._logsafe import install as install_log_filter

        install_log_filter()
        if _metrics_protocol() == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetricExporter,
            )

            return GrpcMetricExporter(preferred_temporality=preferred)
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(preferred_temporality=preferred)
    return OTLPJsonFileMetricExporter(default_metrics_path(session_path), preferred)


def default_meter_provider(
    session_path: str | os.PathLike[str], *, resource: Resource | None = None
) -> MeterProvider:
    """An SDK MeterProvider exporting with :func:`default_metric_exporter` every minute.

    Its exemplar filter is the SDK's (``trace_based`` unless
    ``OTEL_METRICS_EXEMPLAR_FILTER`` says otherwise); ``shutdown()`` exports
    what is left.
    """
    from ._bridge import default_resource

    reader = PeriodicExportingMetricReader(default_metric_exporter(session_path))
    return MeterProvider(
        metric_readers=[reader], resource=default_resource() if resource is None else resource
    )


# -- at the recorded times ----------------------------------------------------------

BUCKET_NS: Final = 60 * 1_000_000_000
"""``metrics_data`` folds measurements into delta points one minute long."""


def metrics_data(
    spans: Iterable[ReadableSpan],
    *,
    resource: Resource | None = None,
    semconv: str | None = None,
    bucket_ns: int = BUCKET_NS,
) -> MetricsData:
    """The metrics of recorded spans, stamped with the recorded times.

    Measurements are folded into DELTA points per instrument, attribute set
    and ``bucket_ns`` window of their span's end (windows never overlap, so
    a backend can add them up); each histogram bucket keeps the exemplar of
    its latest measurement, with that span's trace and span IDs.
    """
    from ._bridge import _scope, default_resource

    mode = semconv_mode(semconv)
    groups: dict[tuple[str, tuple[tuple[str, AttributeValue], ...], int], list[Measurement]] = {}
    for span in spans:
        for m in span_measurements(span, mode):
            window = m.time_ns // bucket_ns * bucket_ns
            key = (m.instrument, tuple(sorted(m.attributes.items())), window)
            groups.setdefault(key, []).append(m)
    by_name: dict[str, list[Any]] = {}
    for (name, labels, window), found in sorted(groups.items(), key=lambda kv: kv[0][2]):
        point = _point(INSTRUMENTS[name], dict(labels), window, window + bucket_ns, found)
        by_name.setdefault(name, []).append(point)
    metrics = []
    for name, points in by_name.items():
        spec = INSTRUMENTS[name]
        data: Sum | Histogram
        if spec.counter:
            data = Sum(points, AggregationTemporality.DELTA, is_monotonic=True)
        else:
            data = Histogram(points, AggregationTemporality.DELTA)
        metrics.append(Metric(name, spec.description, spec.unit, data))
    scope = _scope()
    return MetricsData(
        [
            ResourceMetrics(
                default_resource() if resource is None else resource,
                [ScopeMetrics(InstrumentationScope(scope.name, scope.version), metrics, "")]
                if metrics
                else [],
                "",
            )
        ]
    )


def _point(
    spec: _Instrument, labels: dict[str, Any], start: int, end: int, found: Sequence[Measurement]
) -> Any:
    exemplars: dict[int, Exemplar] = {}
    if spec.counter:
        last = found[-1]
        return NumberDataPoint(
            labels,
            start,
            end,
            sum(m.value for m in found),
            exemplars=[_exemplar(last)],
        )
    bounds = spec.buckets
    counts = [0] * (len(bounds) + 1)
    for m in found:
        index = next((i for i, b in enumerate(bounds) if m.value <= b), len(bounds))
        counts[index] += 1
        exemplars[index] = _exemplar(m)
    values = [m.value for m in found]
    return HistogramDataPoint(
        labels,
        start,
        end,
        len(values),
        sum(values),
        counts,
        list(bounds),
        min(values),
        max(values),
        exemplars=[exemplars[i] for i in sorted(exemplars)],
    )


def _exemplar(m: Measurement) -> Exemplar:
    return Exemplar({}, m.value, m.time_ns, m.span_id, m.trace_id)


def export_metrics(
    path: str | os.PathLike[str],
    exporter: MetricExporter | None = None,
    *,
    semconv: str | None = None,
) -> int:
    """Send the GenAI metrics of a session file, stamped with its recorded times.

    The spans are those :func:`~loopscribe.otel.replay` emits, so recorded and
    imported sessions alike give the metrics a live bridge recorded.

    Args:
        path: The session file.
        exporter: Where to send; default :func:`default_metric_exporter` with
            DELTA temporality (shut down afterwards).
        semconv: As for :class:`GenAIMetrics`.

    Returns:
        The number of data points sent.

    Raises:
        CorruptRecordError: A complete line of the file is damaged.
        OSError: The file cannot be read, or the exporter refused the data.
    """
    from opentelemetry.sdk.trace import SpanProcessor

    from ._bridge import replay

    spans: list[ReadableSpan] = []

    class _Collect(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            spans.append(span)

    replay(path, _Collect(), metrics=False)
    data = metrics_data(spans, semconv=semconv)
    count = sum(
        len(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    )
    if not count:
        return 0
    owned = exporter is None
    target = (
        default_metric_exporter(path, temporality=AggregationTemporality.DELTA)
        if exporter is None
        else exporter
    )
    try:
        result = target.export(data)
    finally:
        if owned:
            target.shutdown()
    if result is not MetricExportResult.SUCCESS:
        raise OSError(f"{path}: the metrics exporter refused {count} data points")
    return count

"""The embedded default for GenAI metrics, and the metrics of a file at its recorded times.

Imported when a provider, an exporter or a data point is made, so that
``import loopscribe.otel`` does not import the metrics SDK.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

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
from opentelemetry.util.types import AttributeValue

from .._files import append_whole, open_append
from ._metrics import INSTRUMENTS, Measurement, _Instrument, semconv_mode, span_measurements

logger = logging.getLogger("loopscribe.otel")

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

"""The embedded default for GenAI metrics, and the metrics of a file at its recorded times.

Imported when a provider, an exporter or a data point is made, so that
``import loopscribe.otel`` does not import the metrics SDK.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
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

from .._files import append_whole, open_append
from ._metrics import (
    _INFERENCE,
    AGENT_DURATION,
    INSTRUMENTS,
    OPERATION_DURATION,
    TIME_TO_FIRST_CHUNK,
    TOKEN_TYPE,
    TOKEN_USAGE,
    TOOL_DURATION,
    Labels,
    _Instrument,
    raw_measurements,
    semconv_mode,
)
from ._resource import default_resource, scope

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
    reader = PeriodicExportingMetricReader(default_metric_exporter(session_path))
    return MeterProvider(
        metric_readers=[reader], resource=default_resource() if resource is None else resource
    )


# -- loopscribe's own aggregation ------------------------------------------------------


class _Series:
    """One instrument and attribute set (and window): what a data point reports."""

    __slots__ = ("buckets", "count", "exemplars", "high", "low", "total")

    def __init__(self, buckets: int) -> None:
        self.count = 0
        self.total: float = 0
        self.low = float("inf")
        self.high = float("-inf")
        self.buckets = [0] * buckets
        self.exemplars: list[tuple[float, int, int, int] | None] = [None] * buckets
        """The latest measurement per bucket: value, time, trace and span IDs."""


_BOUNDS: Final = {name: spec.buckets for name, spec in INSTRUMENTS.items()}
_OPERATION: Final = "gen_ai.operation.name"
_PROVIDER: Final = "gen_ai.provider.name"
_REQUEST_MODEL: Final = "gen_ai.request.model"
_RESPONSE_MODEL: Final = "gen_ai.response.model"
_ADDRESS: Final = "server.address"
_PORT: Final = "server.port"
_ERROR: Final = "error.type"
_TOOL: Final = "gen_ai.tool.name"
_TOOL_TYPE: Final = "gen_ai.tool.type"
_AGENT: Final = "gen_ai.agent.name"
_INPUT: Final = "gen_ai.usage.input_tokens"
_OUTPUT: Final = "gen_ai.usage.output_tokens"
_TTFC: Final = "gen_ai.response.time_to_first_chunk"
_INT64: Final = 1 << 63
_BATCH: Final = 64
"""Spans :meth:`MetricsAggregator.measure` holds before adding them up together."""


_Plan = tuple[
    tuple[tuple[str, bool], ...], tuple[tuple[_Series, tuple[float, ...], str | None], ...]
]
"""What a span of one signature adds: the attributes to check first (as seconds or
counts), then each series with its bounds and the attribute its value comes from
(``None``: the span's duration)."""


class MetricsAggregator:
    """Adds up the measurements of spans itself, cheaply, for the embedded default and export.

    The SDK's instruments clean, hash and sort every measurement's
    attributes (tens of microseconds a call); here a measurement is a
    dictionary lookup by its label tuple and a few additions, with the
    latest exemplar kept per histogram bucket (per counter for a sum), as
    the SDK's reservoirs do. Spans are added up 64 at a time, and whenever
    the metrics are read, so nothing read misses a span measured before.

    Args:
        semconv: As for :class:`~loopscribe.otel.GenAIMetrics`.
        window_ns: Fold measurements into windows this long (for recorded
            times); ``0`` folds them all together (live, cumulative).
    """

    def __init__(self, semconv: str | None = None, *, window_ns: int = 0) -> None:
        self.mode = semconv_mode(semconv)
        self._current = self.mode == "current"
        self._window = window_ns
        self._series: dict[tuple[str, Labels, int], _Series] = {}
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._lock = threading.Lock()
        self._pending: deque[tuple[Mapping[str, Any], int, int, int, int]] = deque()
        """Spans not added up yet: appended and taken one at a time (atomic, so none is
        lost to a read that drains them from another thread)."""
        self._failed = 0

    def record(self, span: ReadableSpan) -> None:
        """Add the measurements of one finished span; never raises."""
        try:
            context, start, end = span.context, span.start_time, span.end_time
            if context is None or start is None or end is None:
                return
            attrs = span.attributes or {}
        except Exception:
            self._failed += 1
            logger.exception("loopscribe could not measure span %r", span.name)
            return
        self.measure(attrs, start, end, context.trace_id, context.span_id)

    @property
    def failed_spans(self) -> int:
        """Spans that could not be measured (each was logged)."""
        self._drain()
        return self._failed

    def measure(
        self, attrs: Mapping[str, Any], start_ns: int, end_ns: int, trace_id: int, span_id: int
    ) -> None:
        """Add the measurements of a finished span given by its parts; never raises.

        What :meth:`record` does, for a caller (the bridge) that holds the
        span's attributes, times and IDs already. The span is added with the
        next few dozen, at once: in a row, the aggregator's lookups stay in the
        processor's caches, which the model call in between each span evicts.
        """
        pending = self._pending
        pending.append((attrs, start_ns, end_ns, trace_id, span_id))
        if len(pending) >= _BATCH:
            self._drain()

    def _drain(self) -> None:
        """Add what :meth:`measure` holds (the series under one lock for them all)."""
        pending = self._pending
        if not pending:
            return
        measure, take = self._measure, pending.popleft
        with self._lock:
            while pending:
                measure(*take())

    def _measure(
        self, attrs: Mapping[str, Any], start_ns: int, end_ns: int, trace_id: int, span_id: int
    ) -> None:
        """:meth:`measure` now; the caller holds the lock."""
        try:
            window = end_ns // self._window * self._window if self._window else 0
            if self._current:
                get = attrs.get
                operation = get(_OPERATION)
                # Spans with the same labels (and the same measurements present)
                # share a plan: the series they add to, found once.
                signature: tuple[Any, ...]
                if operation in _INFERENCE:
                    signature = (
                        operation,
                        get(_PROVIDER),
                        get(_REQUEST_MODEL),
                        get(_RESPONSE_MODEL),
                        get(_ADDRESS),
                        get(_PORT),
                        get(_ERROR),
                        _INPUT in attrs,
                        _OUTPUT in attrs,
                        _TTFC in attrs,
                        window,
                    )
                elif operation == "execute_tool":
                    signature = (operation, get(_TOOL), get(_TOOL_TYPE), get(_ERROR), window)
                elif operation == "invoke_agent":
                    signature = (
                        operation,
                        get(_AGENT),
                        get(_PROVIDER),
                        get(_REQUEST_MODEL),
                        get(_ERROR),
                        window,
                    )
                else:
                    return  # no GenAI operation: nothing to measure
                plan = self._plans.get(signature)
                if plan is None:
                    plan = self._plan(attrs, start_ns, end_ns, window, signature)
                if self._apply(plan, attrs, start_ns, end_ns, trace_id, span_id):
                    return
            found = raw_measurements(attrs, start_ns, end_ns, self.mode)
            exemplar = (end_ns, trace_id, span_id)
            for name, value, labels in found:
                self._add(self._get(name, labels, window), _BOUNDS[name], value, exemplar)
        except Exception:
            self._failed += 1
            logger.exception(
                "loopscribe could not measure span %r", attrs.get("gen_ai.operation.name")
            )

    def _get(self, name: str, labels: Labels, window: int) -> _Series:
        key = (name, labels, window)
        s = self._series.get(key)
        if s is None:
            s = self._series[key] = _Series(len(_BOUNDS[name]) + 1)
        return s

    @staticmethod
    def _add(
        s: _Series, bounds: tuple[float, ...], value: float, exemplar: tuple[int, int, int]
    ) -> None:
        s.count += 1
        s.total += value
        if value < s.low:  # noqa: PLR1730 - a comparison is cheaper than min()
            s.low = value
        if value > s.high:  # noqa: PLR1730
            s.high = value
        index = bisect.bisect_left(bounds, value)
        s.buckets[index] += 1
        s.exemplars[index] = (value, *exemplar)

    def _plan(
        self,
        attrs: Mapping[str, Any],
        start: int,
        end: int,
        window: int,
        signature: tuple[Any, ...],
    ) -> _Plan:
        """The series a span of this signature adds to, and where each value comes from."""
        sources = {
            OPERATION_DURATION: None,
            TOOL_DURATION: None,
            AGENT_DURATION: None,
            TIME_TO_FIRST_CHUNK: _TTFC,
        }
        plan = []
        checks = []
        for name, _value, labels in raw_measurements(attrs, start, end, self.mode):
            source: str | None
            if name == TOKEN_USAGE:
                source = _INPUT if labels[-1] == (TOKEN_TYPE, "input") else _OUTPUT
            else:
                source = sources[name]
            plan.append((self._get(name, labels, window), _BOUNDS[name], source))
            if source is not None:
                checks.append((source, source == _TTFC))
        self._plans[signature] = found = (tuple(checks), tuple(plan))
        return found

    def _apply(
        self,
        plan: _Plan,
        attrs: Mapping[str, Any],
        start: int,
        end: int,
        trace: int,
        span: int,
    ) -> bool:
        """Add a span's values along its plan; ``False`` (nothing added) if a value is off."""
        checks, series = plan
        for key, seconds in checks:
            count = attrs[key]
            kind = type(count)
            if not ((kind is int or (seconds and kind is float)) and 0 <= count < _INT64):
                return False  # not a count: the generic path leaves it out
        duration = (end - start) / 1e9 if end > start else 0.0
        bisect_left = bisect.bisect_left
        for s, bounds, source in series:
            value = duration if source is None else attrs[source]
            s.count += 1
            s.total += value
            if value < s.low:  # noqa: PLR1730 - a comparison is cheaper than min()
                s.low = value
            if value > s.high:  # noqa: PLR1730
                s.high = value
            index = bisect_left(bounds, value)
            s.buckets[index] += 1
            s.exemplars[index] = (value, end, trace, span)
        return True

    def metrics(self, start_ns: int, end_ns: int) -> list[Metric]:
        """The series as OTLP metrics: DELTA per window, else CUMULATIVE from ``start_ns``."""
        self._drain()
        with self._lock:
            items = sorted(
                ((key, _copy(s)) for key, s in self._series.items()), key=lambda kv: kv[0][2]
            )
        temporality = (
            AggregationTemporality.DELTA if self._window else AggregationTemporality.CUMULATIVE
        )
        by_name: dict[str, list[Any]] = {}
        for (name, labels, window), s in items:
            first, last = (window, window + self._window) if self._window else (start_ns, end_ns)
            by_name.setdefault(name, []).append(_point(INSTRUMENTS[name], labels, first, last, s))
        found = []
        for name, points in by_name.items():
            spec = INSTRUMENTS[name]
            data: Sum | Histogram
            if spec.counter:
                data = Sum(points, temporality, is_monotonic=True)
            else:
                data = Histogram(points, temporality)
            found.append(Metric(name, spec.description, spec.unit, data))
        return found

    def __len__(self) -> int:
        self._drain()
        return len(self._series)


def _copy(s: _Series) -> _Series:
    c = _Series(0)
    c.count, c.total, c.low, c.high = s.count, s.total, s.low, s.high
    c.buckets, c.exemplars = list(s.buckets), list(s.exemplars)
    return c


def _point(spec: _Instrument, labels: Labels, start: int, end: int, s: _Series) -> Any:
    exemplars = [
        Exemplar({}, value, at, span, trace) for value, at, trace, span in filter(None, s.exemplars)
    ]
    if spec.counter:
        latest = max(exemplars, key=lambda e: e.time_unix_nano)
        return NumberDataPoint(dict(labels), start, end, s.total, exemplars=[latest])
    return HistogramDataPoint(
        dict(labels),
        start,
        end,
        s.count,
        s.total,
        list(s.buckets),
        list(spec.buckets),
        s.low,
        s.high,
        exemplars=exemplars,
    )


def _metrics_data(metrics: list[Metric], resource: Resource | None) -> MetricsData:
    own = scope()
    return MetricsData(
        [
            ResourceMetrics(
                default_resource() if resource is None else resource,
                [ScopeMetrics(InstrumentationScope(own.name, own.version), metrics, "")]
                if metrics
                else [],
                "",
            )
        ]
    )


EXPORT_INTERVAL_ENV: Final = "OTEL_METRIC_EXPORT_INTERVAL"
_DEFAULT_INTERVAL_MS: Final = 60_000


class EmbeddedMetrics:
    """The bridge's own metrics pipeline when the host has no MeterProvider.

    Spans are measured by a :class:`MetricsAggregator` and exported as
    CUMULATIVE points every ``OTEL_METRIC_EXPORT_INTERVAL`` milliseconds
    (default 60,000), at :meth:`force_flush` and at :meth:`shutdown`, with
    :func:`default_metric_exporter` (OTLP when configured, else the file
    beside the session).

    Args:
        session_path: The session the spans come from.
        resource: The metrics' Resource; default :func:`default_resource`.
        semconv: As for :class:`~loopscribe.otel.GenAIMetrics`.
        exporter: Instead of :func:`default_metric_exporter`.
    """

    def __init__(
        self,
        session_path: str | os.PathLike[str],
        *,
        resource: Resource | None = None,
        semconv: str | None = None,
        exporter: MetricExporter | None = None,
    ) -> None:
        self.aggregator = MetricsAggregator(semconv)
        self.measure = self.aggregator.measure
        """As :meth:`MetricsAggregator.measure` (the bridge's hot path: no export, no SDK call)."""
        self.exporter = default_metric_exporter(session_path) if exporter is None else exporter
        self._resource = resource
        self._start_ns = time.time_ns()
        self._sent = -1
        self._export_lock = threading.Lock()
        self._stop = threading.Event()
        interval_ms = _interval_ms()
        self._thread = threading.Thread(
            target=self._run, args=(interval_ms / 1000,), name="loopscribe-metrics", daemon=True
        )
        self._thread.start()

    @property
    def failed_spans(self) -> int:
        """Spans that could not be measured."""
        return self.aggregator.failed_spans

    def record(self, span: ReadableSpan) -> None:
        """Measure one finished span (the hot path: no export, no SDK call)."""
        self.aggregator.record(span)

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._export()

    def _export(self, timeout_millis: float = 10_000) -> bool:
        with self._export_lock:
            metrics = self.aggregator.metrics(self._start_ns, time.time_ns())
            if not metrics:
                return True
            try:
                result = self.exporter.export(
                    _metrics_data(metrics, self._resource), timeout_millis=timeout_millis
                )
            except Exception:
                logger.exception("loopscribe could not export its GenAI metrics")
                return False
            return result is MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export the current totals now."""
        return self._export(timeout_millis)

    def shutdown(self) -> None:
        """Export the totals a last time and stop."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(5)
        self._export()
        self.exporter.shutdown()


def _interval_ms() -> float:
    raw = os.environ.get(EXPORT_INTERVAL_ENV)
    try:
        value = float(raw) if raw else _DEFAULT_INTERVAL_MS
    except ValueError:
        value = -1
    if value <= 0:
        logger.warning("%s=%r is not a positive number of milliseconds", EXPORT_INTERVAL_ENV, raw)
        return _DEFAULT_INTERVAL_MS
    return value


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
    aggregator = MetricsAggregator(semconv, window_ns=bucket_ns)
    for span in spans:
        aggregator.record(span)
    return _metrics_data(aggregator.metrics(0, 0), resource)

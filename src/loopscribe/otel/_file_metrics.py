"""The GenAI metrics of a recorded session, at its recorded times: ``export --metrics``.

The spans are those :func:`~loopscribe.otel.replay` emits, folded by the same
aggregator the live pipeline uses; this module sits above both the bridge and
the metrics so neither imports the other's module.
"""

from __future__ import annotations

import os

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from ._metrics_export import default_metric_exporter, metrics_data
from ._replay import replay

__all__ = ["export_metrics"]


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

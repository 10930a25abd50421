"""OpenTelemetry for loopscribe sessions: spans that carry references, never bodies.

Live, a :class:`SpanBridge` observes a Session and hands one span per run and
per execution attempt to a standard ``SpanProcessor``; later, :func:`replay`
produces exactly the same spans from the file. IDs are pure functions of the
recording coordinates, so a ``CallRef`` is enough to find a span::

    from loopscribe import Session
    from loopscribe.otel import SpanBridge, default_processor

    bridge = SpanBridge()  # the host's TracerProvider if it has one, else the default
    with Session.create("agent.jsonl", observers=[bridge]) as session:
        ...
    bridge.shutdown()

Spans carry session, run, execution, attempt, record sequence numbers and a
``file://...#seq=N`` URI, plus the GenAI semantic-convention labels (model,
provider, tool, agent, token usage, finish reasons, request parameters,
``error.type``). Prompts, messages, arguments, tool output and error messages
stay in the session file; :func:`resolve_reference` turns a span's
``gen_ai.*_ref`` back into the conventions' message JSON.

Spans the host's own instrumentation made go the other way: an
:class:`OffloadingProcessor` (``loopscribe.intake``) in front of the host's
span processor records their bodies into session files and hands them on
without them. Their executions keep the host's span IDs
(:func:`host_execution_id`), and their ``host_span`` records
(:func:`span_record_data`) let replay give back exactly the spans the host
exported.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._deferred import provided as _provided
from .._lazy import listing as _listing
from .._lazy import loader as _loader

if _TYPE_CHECKING:
    from .._attempts import TERMINAL_TYPES
    from ._bridge import SpanBridge, to_file_uri
    from ._export import (
        OTLPJsonFileExporter,
        default_export_path,
        default_exporter,
        default_processor,
        describe_destination,
    )
    from ._file_metrics import export_metrics
    from ._genai import MessageReferenceError, parse_reference, resolve_reference
    from ._host import HOST_SPAN, span_from_record_data, span_record_data
    from ._ids import (
        host_execution_id,
        host_span_id,
        run_span_id,
        span_context,
        span_id,
        trace_id,
    )
    from ._metrics import (
        SEMCONV_ENV,
        GenAIMetrics,
        Measurement,
        host_meter_provider,
        semconv_mode,
        span_measurements,
    )
    from ._metrics_export import (
        EmbeddedMetrics,
        MetricsAggregator,
        OTLPJsonFileMetricExporter,
        default_meter_provider,
        default_metric_exporter,
        default_metrics_path,
        metrics_data,
    )
    from ._otlp import encode_otlp_json, encode_otlp_protobuf
    from ._replay import replay
    from ._resource import default_resource

_EXPORTS: dict[str, tuple[str, ...]] = {
    ".._attempts": ("TERMINAL_TYPES",),
    "._bridge": ("SpanBridge", "to_file_uri"),
    "._export": (
        "OTLPJsonFileExporter",
        "default_export_path",
        "default_exporter",
        "default_processor",
        "describe_destination",
    ),
    "._file_metrics": ("export_metrics",),
    "._genai": ("MessageReferenceError", "parse_reference", "resolve_reference"),
    "._host": ("HOST_SPAN", "span_from_record_data", "span_record_data"),
    "._ids": (
        "host_execution_id",
        "host_span_id",
        "run_span_id",
        "span_context",
        "span_id",
        "trace_id",
    ),
    "._metrics": (
        "SEMCONV_ENV",
        "GenAIMetrics",
        "Measurement",
        "host_meter_provider",
        "semconv_mode",
        "span_measurements",
    ),
    "._metrics_export": (
        "EmbeddedMetrics",
        "MetricsAggregator",
        "OTLPJsonFileMetricExporter",
        "default_meter_provider",
        "default_metric_exporter",
        "default_metrics_path",
        "metrics_data",
    ),
    "._otlp": ("encode_otlp_json", "encode_otlp_protobuf"),
    "._replay": ("replay",),
    "._resource": ("default_resource",),
}
"""Where each name lives, imported on first use (``loopscribe._lazy``): reading
a span ID does not load the SDK, the exporters or the metrics."""

__all__ = [
    "HOST_SPAN",
    "SEMCONV_ENV",
    "TERMINAL_TYPES",
    "EmbeddedMetrics",
    "GenAIMetrics",
    "Measurement",
    "MessageReferenceError",
    "MetricsAggregator",
    "OTLPJsonFileExporter",
    "OTLPJsonFileMetricExporter",
    "OffloadingProcessor",
    "SpanBridge",
    "default_export_path",
    "default_exporter",
    "default_meter_provider",
    "default_metric_exporter",
    "default_metrics_path",
    "default_processor",
    "default_resource",
    "describe_destination",
    "encode_otlp_json",
    "encode_otlp_protobuf",
    "export_metrics",
    "host_execution_id",
    "host_meter_provider",
    "host_span_id",
    "metrics_data",
    "parse_reference",
    "replay",
    "resolve_reference",
    "run_span_id",
    "semconv_mode",
    "span_context",
    "span_from_record_data",
    "span_id",
    "span_measurements",
    "span_record_data",
    "to_file_uri",
    "trace_id",
]


_load = _loader(__name__, _EXPORTS, globals())


def __getattr__(name: str) -> object:
    if name == "OffloadingProcessor":
        # The intake's (a way in, a layer above): loaded by what the package facade
        # registered, so that this package never imports the intake itself.
        return _provided(__name__, name)
    return _load(name)


__dir__ = _listing(globals())

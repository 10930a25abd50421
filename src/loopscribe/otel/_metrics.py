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
or the embedded default of ``_metrics_export``, which also builds the same
measurements at the recorded times for ``loopscribe export --metrics``).
This module needs only the metrics API; the SDK is imported where a
provider, an exporter or a data point is made.

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
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue

from ._resource import scope

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


_INT64: Final = 1 << 63
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_LABEL_SETS: Final = 4096
"""Label sets whose attribute dictionaries :class:`GenAIMetrics` keeps made."""


def _int(value: Any) -> int | None:
    """A token count: an int OTLP can carry (a 64-bit one), never negative."""
    return value if type(value) is int and 0 <= value < _INT64 else None


Labels = tuple[tuple[str, AttributeValue], ...]
"""A measurement's attributes as ordered pairs: hashable, and cheap to build."""
Raw = tuple[str, "int | float", Labels]


def _labels(attrs: Mapping[str, Any], keys: Iterable[str], found: list[Any]) -> None:
    for key in keys:
        value = attrs.get(key)
        if value is not None:
            found.append((key, value))


def raw_measurements(
    attrs: Mapping[str, Any], start_ns: int, end_ns: int, mode: Semconv = "current"
) -> list[Raw]:
    """``(instrument, value, labels)`` of a finished span's attributes and times.

    The hot path of live metrics: no object but the tuples is made.
    """
    operation = attrs.get("gen_ai.operation.name")
    if not isinstance(operation, str):
        return []
    duration_s = max(0, end_ns - start_ns) / 1e9
    pairs: list[Any] = [("gen_ai.operation.name", operation)]
    if operation in _INFERENCE:
        provider = attrs.get("gen_ai.provider.name")
        pairs.append(
            ("gen_ai.provider.name", provider if isinstance(provider, str) else OTHER_PROVIDER)
        )
        _labels(attrs, _CHAT_LABELS, pairs)
        labels: Labels = tuple(pairs)
        found: list[Raw] = [(OPERATION_DURATION, duration_s, labels)]
        ttfc = attrs.get("gen_ai.response.time_to_first_chunk")
        if (type(ttfc) is float or type(ttfc) is int) and 0 <= ttfc < _INT64:
            found.append((TIME_TO_FIRST_CHUNK, float(ttfc), labels))
        _token_measurements(attrs, labels, mode, found)
        return found
    if operation == "execute_tool":
        _labels(attrs, _TOOL_LABELS, pairs)
        return [(TOOL_DURATION, duration_s, tuple(pairs))]
    if operation == "invoke_agent":
        _labels(attrs, _AGENT_LABELS, pairs)
        return [(AGENT_DURATION, duration_s, tuple(pairs))]
    return []


def span_measurements(span: ReadableSpan, mode: Semconv = "current") -> list[Measurement]:
    """The measurements a finished span gives; none for a span of no GenAI operation."""
    context = span.context
    start, end = span.start_time, span.end_time
    if context is None or start is None or end is None:
        return []
    trace_id, span_id = context.trace_id, context.span_id
    return [
        Measurement(name, value, dict(labels), end, trace_id, span_id)
        for name, value, labels in raw_measurements(span.attributes or {}, start, end, mode)
    ]


_TOKEN_INPUT: Final = (TOKEN_TYPE, "input")
_TOKEN_OUTPUT: Final = (TOKEN_TYPE, "output")
_MODALITY: Final = (TOKEN_MODALITY, "unknown")


def _token_measurements(
    attrs: Mapping[str, Any], labels: Labels, mode: Semconv, found: list[Raw]
) -> None:
    input_tokens = _int(attrs.get("gen_ai.usage.input_tokens"))
    output_tokens = _int(attrs.get("gen_ai.usage.output_tokens"))
    if mode != "latest":
        # The histogram is recorded only for counts the provider gave (as util-genai does).
        if input_tokens is not None:
            found.append((TOKEN_USAGE, input_tokens, (*labels, _TOKEN_INPUT)))
        if output_tokens is not None:
            found.append((TOKEN_USAGE, output_tokens, (*labels, _TOKEN_OUTPUT)))
    if mode == "current":
        return
    # The conventions' counters: recorded for every operation, failed ones too,
    # 0 with modality "unknown" when no usage came back.
    counted = (*(pair for pair in labels if pair[0] != "error.type"), _MODALITY)
    found.append((USAGE_INPUT, input_tokens or 0, counted))
    found.append((USAGE_OUTPUT, output_tokens or 0, counted))
    cache_read = _int(attrs.get("gen_ai.usage.cache_read.input_tokens"))
    if cache_read:
        found.append((USAGE_CACHE_READ, cache_read, counted))
    cache_write = next(
        (n for n in (_int(attrs.get(k)) for k in CACHE_WRITE_ATTRIBUTES) if n is not None), None
    )
    if cache_write:
        found.append((USAGE_CACHE_WRITE, cache_write, counted))
    reasoning = _int(attrs.get("gen_ai.usage.reasoning.output_tokens"))
    if reasoning:
        found.append((USAGE_REASONING, reasoning, counted))
    if input_tokens is not None:
        found.append((OPERATION_INPUT, input_tokens, labels))
    if output_tokens is not None:
        found.append((OPERATION_OUTPUT, output_tokens, labels))


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
        self._sinks: dict[str, Any] = {}
        self._label_dicts: dict[Labels, Mapping[str, AttributeValue]] = {}
        self._lock = threading.Lock()
        self.failed_spans = 0
        """Spans whose measurements could not be recorded (each was logged)."""

    def _sink(self, name: str) -> Any:
        """The bound ``record`` (histogram) or ``add`` (counter) of instrument ``name``."""
        sink = self._sinks.get(name)
        if sink is None:
            with self._lock:
                sink = self._sinks.get(name)
                if sink is None:
                    spec = INSTRUMENTS[name]
                    if spec.counter:
                        sink = self._meter.create_counter(
                            name, unit=spec.unit, description=spec.description
                        ).add
                    else:
                        sink = self._meter.create_histogram(
                            name,
                            unit=spec.unit,
                            description=spec.description,
                            explicit_bucket_boundaries_advisory=list(spec.buckets),
                        ).record
                    self._sinks[name] = sink
        return sink

    def _attributes(self, labels: Labels) -> Mapping[str, AttributeValue]:
        """One dictionary per label set, made once: a call's labels repeat call after call."""
        found = self._label_dicts.get(labels)
        if found is None:
            if len(self._label_dicts) >= _LABEL_SETS:
                self._label_dicts.clear()  # a bound, for hosts with unbounded label values
            found = self._label_dicts[labels] = dict(labels)
        return found

    def record(self, span: ReadableSpan) -> None:
        """Record the measurements of one finished span; never raises."""
        try:
            context, start, end = span.context, span.start_time, span.end_time
            if context is None or start is None or end is None:
                return
            self._measure(span.attributes or {}, start, end, context)
        except Exception:
            self.failed_spans += 1
            logger.exception("loopscribe could not record the metrics of span %r", span.name)

    def measure(
        self, attrs: Mapping[str, Any], start_ns: int, end_ns: int, trace_id: int, span_id: int
    ) -> None:
        """Record the measurements of a finished span given by its parts; never raises.

        What :meth:`record` does, for a caller (the bridge) that holds the
        span's attributes, times and IDs already.
        """
        try:
            self._measure(attrs, start_ns, end_ns, SpanContext(trace_id, span_id, False, _SAMPLED))
        except Exception:
            self.failed_spans += 1
            logger.exception(
                "loopscribe could not record the metrics of span %r",
                attrs.get("gen_ai.operation.name"),
            )

    def _measure(
        self, attrs: Mapping[str, Any], start_ns: int, end_ns: int, span: SpanContext
    ) -> None:
        found = raw_measurements(attrs, start_ns, end_ns, self.mode)
        if not found:
            return
        # Each measurement in the span's context: an exemplar-sampling provider
        # (the SDK's default filter, ``trace_based``) keeps its trace and span IDs.
        context = trace_api.set_span_in_context(NonRecordingSpan(span))
        for name, value, labels in found:
            self._sink(name)(value, self._attributes(labels), context=context)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what an owned provider holds; a host's provider is left to the host."""
        if self._owned:
            flushed: bool = self.meter_provider.force_flush(timeout_millis)  # type: ignore[attr-defined]
            return flushed
        return True

    def shutdown(self) -> None:
        """Flush and stop an owned provider; a host's provider is left to the host."""
        if self._owned:
            self._owned = False
            self.meter_provider.shutdown()  # type: ignore[attr-defined]


def _version() -> str:
    return scope().version or ""


def host_meter_provider() -> metrics_api.MeterProvider | None:
    """The global MeterProvider when the host configured an SDK one, else ``None``."""
    sdk = sys.modules.get("opentelemetry.sdk.metrics")
    if sdk is None:
        return None  # no SDK MeterProvider can exist: the SDK was never imported
    provider = metrics_api.get_meter_provider()
    return provider if isinstance(provider, sdk.MeterProvider) else None

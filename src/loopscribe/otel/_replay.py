"""replay: the spans of a session file, exactly as a live SpanBridge emitted them."""

from __future__ import annotations

import os

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor

from .._reader import read
from ._bridge import SpanBridge
from ._metrics import GenAIMetrics


def replay(
    path: str | os.PathLike[str],
    processor: SpanProcessor | None = None,
    *,
    tracer_provider: trace_api.TracerProvider | None = None,
    resource: Resource | None = None,
    file_uri: str | os.PathLike[str] | None = None,
    ref_base: str | None = None,
    metrics: GenAIMetrics | metrics_api.MeterProvider | bool | None = None,
) -> int:
    """Emit the spans of a session file, exactly as a live :class:`SpanBridge` did.

    Records are read without decoding typed values, so no codec
    registrations are needed; the bridge reads the same field names from the
    raw JSON as from the typed objects it saw live.

    A run without ``run_close`` (interrupted, or still being written) gets
    the spans of its finished attempts only, the same as the live bridge
    emitted before the process stopped; see the module documentation.
    The processor is neither flushed nor shut down.

    Args:
        path: The session file.
        processor: Receives each span through ``on_end``.
        tracer_provider: Instead of ``processor``: a host's SDK TracerProvider
            (its processors and resource), as for :class:`SpanBridge`. With
            neither, the global SDK provider if one is configured.
        resource: The spans' Resource with ``processor``; default :func:`default_resource`.
        file_uri: How spans name the file; default ``path`` as a ``file://`` URI,
            which is what a live bridge attached to the Session used.
        ref_base: As for :class:`SpanBridge`.
        metrics: As for :class:`SpanBridge`; the measurements are recorded now
            (for the recorded times, see :func:`export_metrics`).

    Returns:
        The number of spans handed to the processor.

    Raises:
        ValueError: Neither a processor nor a configured TracerProvider is there.
        CorruptRecordError: A complete line of the file is damaged.
        UnsupportedVersionError: The file's format version is not supported.
        OSError: The file cannot be read.
    """
    bridge = SpanBridge(
        processor,
        tracer_provider=tracer_provider,
        resource=resource,
        file_uri=path if file_uri is None else file_uri,
        ref_base=ref_base,
        metrics=metrics,
    )
    if bridge.processor is None:
        raise ValueError(
            "replay needs somewhere to send spans: pass a processor or a tracer_provider "
            "(or configure a global SDK TracerProvider)"
        )
    for record in read(path, decode=False):
        bridge(record)
    return bridge.spans_emitted

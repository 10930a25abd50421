"""Getting spans out of the process: OTLP over the network, or OTLP JSON lines on disk.

:func:`default_processor` follows the standard ``OTEL_EXPORTER_OTLP_*``
variables. With no endpoint configured it writes OTLP JSON lines beside the
session file instead, which a Collector's ``otlpjsonfile`` receiver can ship
later, so a host without a collector loses nothing.

Recording never waits on export: the bridge hands spans to a
``BatchSpanProcessor``, whose ``on_end`` only appends to a bounded queue.
Exporter modules (and so grpc and protobuf) are imported only when a
processor or a JSON line is actually made.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .._files import append_whole, open_append
from .._logsafe import install as install_log_filter
from ._otlp import encode_otlp_json

logger = logging.getLogger("loopscribe.otel")

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
TIMEOUT = "OTEL_EXPORTER_OTLP_TIMEOUT"
TRACES_TIMEOUT = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"

_DEFAULT_PROTOCOL = "http/protobuf"  # the OTLP specification's default
_DEFAULT_TIMEOUT_S = 10.0


def default_export_path(session_path: str | os.PathLike[str]) -> Path:
    """Where the embedded default writes OTLP JSON lines: ``s.jsonl`` gives ``s.jsonl.otlp.jsonl``.

    The whole session file name is kept, so the export of ``a.jsonl`` and of
    ``a.log`` never share a file.
    """
    path = Path(session_path)
    return path.with_name(path.name + ".otlp.jsonl")


class OTLPJsonFileExporter(SpanExporter):
    """A SpanExporter that appends OTLP JSON lines to a file.

    Each ``export`` call appends one ``ExportTraceServiceRequest`` as one
    line under the file's ``flock``, whole or not at all: a line a failed
    write (a full disk, a file-size limit) or a crash left unfinished is cut
    back before the next one, so a reader never sees half a request followed
    by another. The file is created (mode 0600) on the first export.

    Args:
        path: The file to append to.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._shutdown = False

    @property
    def path(self) -> Path:
        """The file spans are written to."""
        return self._path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append ``spans`` as one line; never raises."""
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = encode_otlp_json(spans)
        except Exception:
            logger.exception("could not encode %d spans as OTLP JSON", len(spans))
            return SpanExportResult.FAILURE
        with self._lock:
            if self._shutdown:
                logger.warning("OTLP JSON file exporter is shut down; %d spans dropped", len(spans))
                return SpanExportResult.FAILURE
            try:
                if self._fd is None:
                    self._fd = open_append(self._path)
                append_whole(self._fd, line, self._path)
            except OSError:
                logger.exception("could not write %d spans to %s", len(spans), self._path)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Close the file; later exports fail."""
        with self._lock:
            self._shutdown = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered: every export is written before it returns."""
        return True


class _CountingExporter(SpanExporter):
    """Counts what really left the process, so a shutdown can report what did not."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:
            logger.exception("span exporter %s raised", type(self.inner).__name__)
            return SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            with self._lock:
                self.exported += len(spans)
        return result

    def shutdown(self, timeout_millis: float = 30_000) -> None:
        if "timeout_millis" in inspect.signature(self.inner.shutdown).parameters:
            self.inner.shutdown(timeout_millis=timeout_millis)  # type: ignore[call-arg]
        else:
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _BoundedBatchSpanProcessor(BatchSpanProcessor):
    """A BatchSpanProcessor whose shutdown costs at most the export timeout.

    The stock shutdown waits up to 30 s for the queue to drain, one export
    timeout per batch, while a collector is down; this one gives up after
    the export timeout and logs how many spans never left.
    """

    def __init__(
        self, exporter: _CountingExporter, *, shutdown_timeout_millis: float, **options: Any
    ) -> None:
        super().__init__(exporter, **options)
        self._counting = exporter
        self._shutdown_timeout_millis = shutdown_timeout_millis
        self._accepted = 0
        self._count_lock = threading.Lock()
        self._stopped = False

    @property
    def accepted_spans(self) -> int:
        """Spans handed to ``on_end``."""
        return self._accepted

    @property
    def exported_spans(self) -> int:
        """Spans the exporter reported as delivered."""
        return self._counting.exported

    @property
    def dropped_spans(self) -> int:
        """Spans accepted but not (yet) delivered."""
        return max(0, self._accepted - self._counting.exported)

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            with self._count_lock:
                self._accepted += 1
        super().on_end(span)

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # The SDK's inner BatchProcessor takes the timeout its wrapper does not pass on.
        inner: Any = getattr(self, "_batch_processor", None)
        if inner is not None and "timeout_millis" in inspect.signature(inner.shutdown).parameters:
            inner.shutdown(timeout_millis=self._shutdown_timeout_millis)
        else:  # pragma: no cover - an SDK without the bounded inner shutdown
            base: Any = super()  # untyped in the SDK
            base.shutdown()
        dropped = self.dropped_spans
        if dropped:
            # Never name the endpoint or headers here: both may carry credentials.
            logger.warning(
                "%d of %d spans were not exported (collector unreachable, too slow, or "
                "queue full); their records remain in the session file",
                dropped,
                self._accepted,
            )


def default_timeout_s() -> float:
    raw = os.environ.get(TRACES_TIMEOUT) or os.environ.get(TIMEOUT)
    if not raw:
        return _DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        logger.warning(
            "%s/%s=%r is not a positive number of seconds; using %s s",
            TRACES_TIMEOUT,
            TIMEOUT,
            raw,
            _DEFAULT_TIMEOUT_S,
        )
        return _DEFAULT_TIMEOUT_S
    return value


def _protocol() -> str:
    protocol = os.environ.get(TRACES_PROTOCOL) or os.environ.get(PROTOCOL) or _DEFAULT_PROTOCOL
    protocol = protocol.strip().lower()
    if protocol not in ("grpc", "http/protobuf"):
        raise ValueError(
            f"{TRACES_PROTOCOL} / {PROTOCOL} is {protocol!r}; loopscribe supports 'grpc' and "
            "'http/protobuf' (the Python OTLP exporters implement no 'http/json')"
        )
    return protocol


def _endpoint_configured() -> bool:
    return bool(os.environ.get(TRACES_ENDPOINT) or os.environ.get(ENDPOINT))


def _network_exporter(timeout_s: float) -> SpanExporter:
    # The exporters read endpoint, headers, compression and TLS settings from
    # the same variables themselves; only the timeout is passed, so that the
    # bounded shutdown and the exporter agree on it. Their log lines name the
    # endpoint, which may hold credentials: filter them.
    # Both are the SDK's exporters sending encode_otlp_protobuf's bytes.
    install_log_filter()
    if _protocol() == "grpc":
        from ._grpc_exporter import GrpcSpanExporter

        return GrpcSpanExporter(timeout=timeout_s)
    from ._http_exporter import HttpSpanExporter

    return HttpSpanExporter(timeout=timeout_s)


def _export_timeout_s(export_timeout_millis: float | None) -> float:
    return (
        export_timeout_millis / 1000 if export_timeout_millis is not None else default_timeout_s()
    )


def default_exporter(
    session_path: str | os.PathLike[str],
    *,
    export_path: str | os.PathLike[str] | None = None,
    export_timeout_millis: float | None = None,
) -> SpanExporter:
    """The SpanExporter :func:`default_processor` puts behind its batch processor.

    For callers that batch themselves, such as an out-of-process shipper.
    Same arguments and rules as :func:`default_processor`.

    Raises:
        ValueError: The configured protocol is not supported.
    """
    if _endpoint_configured():
        return _network_exporter(_export_timeout_s(export_timeout_millis))
    return OTLPJsonFileExporter(
        default_export_path(session_path) if export_path is None else export_path
    )


def _redacted(url: str) -> str:
    # Userinfo and query strings can hold credentials: keep scheme, host, port, path.
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return "<unparsed endpoint>"
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def describe_destination(
    session_path: str | os.PathLike[str], *, export_path: str | os.PathLike[str] | None = None
) -> str:
    """Where :func:`default_exporter` sends spans, for messages: never a secret.

    Credentials that may sit in an endpoint URL (user info, query) are left
    out, and header values are never read.

    Returns:
        For example ``"OTLP/gRPC http://collector:4317"`` or
        ``"OTLP JSON lines file:///.../s.otlp.jsonl"``.

    Raises:
        ValueError: The configured protocol is not supported.
    """
    if not _endpoint_configured():
        target = default_export_path(session_path) if export_path is None else export_path
        return f"OTLP JSON lines {Path(target).absolute().as_uri()}"
    protocol = _protocol()
    specific = os.environ.get(TRACES_ENDPOINT)
    base = os.environ.get(ENDPOINT, "")
    if protocol == "grpc":
        return f"OTLP/gRPC {_redacted(specific or base)}"
    url = specific or f"{base.removesuffix('/')}/v1/traces"
    return f"OTLP/HTTP {_redacted(url)}"


def default_processor(
    session_path: str | os.PathLike[str],
    *,
    export_path: str | os.PathLike[str] | None = None,
    export_timeout_millis: float | None = None,
    max_queue_size: int | None = None,
    schedule_delay_millis: float | None = None,
    max_export_batch_size: int | None = None,
) -> SpanProcessor:
    """A ``BatchSpanProcessor`` configured from the standard OTLP variables.

    * ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``
      set: the OTLP exporter for ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
      ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc`` or ``http/protobuf``, the
      default), which reads endpoint, headers, compression and TLS settings
      from the usual variables: the SDK's exporter sending
      :func:`encode_otlp_protobuf`'s bytes (the SDK's request, made faster).
    * No endpoint set: an :class:`OTLPJsonFileExporter` writing to
      ``export_path``, by default :func:`default_export_path` beside the session.

    The export timeout comes from ``export_timeout_millis``, else
    ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`` / ``OTEL_EXPORTER_OTLP_TIMEOUT``
    read in seconds as the Python SDK reads them, else 10 s. It bounds each
    export and also ``shutdown()``: with the collector down, shutdown returns
    after about that long and logs how many spans were not exported (a
    count, never the endpoint or header values).

    Args:
        session_path: The session file the spans come from.
        export_path: Overrides the OTLP JSON file used when no endpoint is set.
        export_timeout_millis: Overrides the export timeout.
        max_queue_size: As for ``BatchSpanProcessor`` (or ``OTEL_BSP_*``).
        schedule_delay_millis: As for ``BatchSpanProcessor``.
        max_export_batch_size: As for ``BatchSpanProcessor``.

    Returns:
        A started ``BatchSpanProcessor`` (typed as its base class); call
        ``shutdown()`` when done.

    Raises:
        ValueError: The configured protocol is not supported.
    """
    timeout_s = _export_timeout_s(export_timeout_millis)
    exporter = default_exporter(
        session_path, export_path=export_path, export_timeout_millis=timeout_s * 1000
    )
    return _BoundedBatchSpanProcessor(
        _CountingExporter(exporter),
        shutdown_timeout_millis=timeout_s * 1000,
        max_queue_size=max_queue_size,
        schedule_delay_millis=schedule_delay_millis,
        max_export_batch_size=max_export_batch_size,
        export_timeout_millis=timeout_s * 1000,
    )

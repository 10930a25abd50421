"""The OTLP/HTTP protobuf exporter, sending loopscribe's own encoding of the spans.

The SDK's exporter builds a protobuf object per span, attribute and value and
serializes them inside ``export``; :class:`HttpSpanExporter` sends the bytes of
:func:`~loopscribe.otel.encode_otlp_protobuf` instead, which are the same bytes
made several times faster. Everything else is the SDK's: endpoint, headers,
compression, TLS, retries, the internal metrics, the request size limit and
the result. ``export`` mirrors the SDK's own, so it is used only with an SDK
whose ``export`` is one this module was written against (checked once, by a
digest of its code); with any other, and with an exporter not laid out as
expected, ``export`` is the SDK's own: an upgrade costs speed, never spans.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import logging
import textwrap
import tokenize
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from ._otlp import encode_otlp_protobuf

_SDK_MODULE = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
_SDK_COMMON = "opentelemetry.exporter.otlp.proto.http._common"
_STATUS_CODE = "http.response.status_code"  # semconv HTTP_RESPONSE_STATUS_CODE


MIRRORED_EXPORTS = frozenset(
    {
        # opentelemetry-exporter-otlp-proto-http 1.45
        "92c470866586f5d4ff78e041bb0198e4b8326edf92a74bf4de72c98efb80d44f",
    }
)
"""Digests (:func:`export_digest`) of the SDK ``export`` methods ``HttpSpanExporter`` mirrors."""
_LAYOUT_TOKENS = frozenset(
    {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
)


def export_digest() -> str | None:
    """SHA-256 of the tokens of the installed SDK's ``OTLPSpanExporter.export`` (no comments)."""
    try:
        source = textwrap.dedent(inspect.getsource(OTLPSpanExporter.export))
    except (OSError, TypeError):  # no source shipped
        return None
    code = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type not in _LAYOUT_TOKENS
    ]
    return hashlib.sha256(" ".join(code).encode()).hexdigest()


def _sdk_helpers() -> tuple[Any, Any, logging.Logger] | None:
    """The SDK's request size check, its error type and its logger, if this is an SDK we mirror."""
    if export_digest() not in MIRRORED_EXPORTS:
        return None
    try:
        common = importlib.import_module(_SDK_COMMON)
    except ImportError:
        return None
    too_large = getattr(common, "_is_request_too_large", None)
    error = getattr(common, "RequestPayloadTooLargeError", None)
    sdk_logger = getattr(importlib.import_module(_SDK_MODULE), "_logger", None)
    if not callable(too_large) or not isinstance(error, type) or sdk_logger is None:
        return None
    return too_large, error, sdk_logger


_HELPERS = _sdk_helpers()


class HttpSpanExporter(OTLPSpanExporter):
    """The SDK's ``OTLPSpanExporter`` (HTTP/protobuf) sending :func:`encode_otlp_protobuf` bytes.

    Takes the SDK exporter's arguments.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fast = _HELPERS is not None and self._known_layout()

    @property
    def encodes_spans_itself(self) -> bool:
        """Whether ``export`` sends loopscribe's encoding (else the SDK's ``export`` runs)."""
        return self._fast

    def _known_layout(self) -> bool:
        client = getattr(self, "_client", None)
        metrics = getattr(self, "_metrics", None)
        return (
            isinstance(getattr(self, "_shutdown", None), bool)
            and isinstance(getattr(self, "_max_request_size", None), int)
            and callable(getattr(client, "export", None))
            and callable(getattr(metrics, "export_operation", None))
        )

    def shutdown(self) -> None:
        """The SDK's shutdown: later exports fail."""
        base: Any = super()  # untyped in the SDK
        base.shutdown()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Send ``spans`` as one request, as the SDK's ``export`` does."""
        if not self._fast or _HELPERS is None:
            return super().export(spans)
        too_large, payload_error, sdk_logger = _HELPERS
        if self._shutdown:
            sdk_logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                serialized = encode_otlp_protobuf(spans)
            except Exception as error:
                sdk_logger.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if too_large(serialized, self._max_request_size):
                sdk_logger.warning(
                    "Dropping span batch: serialized size %d bytes exceeds max_request_size "
                    "%d bytes.",
                    len(serialized),
                    self._max_request_size,
                )
                result.error = payload_error(
                    f"Serialized span request size {len(serialized)} bytes exceeds "
                    f"max_request_size {self._max_request_size} bytes."
                )
                return SpanExportResult.FAILURE
            sent = self._client.export(serialized)
            if not sent.success:
                result.error = sent.error
                status = getattr(sent, "status_code", None)
                result.error_attrs = {_STATUS_CODE: status} if status is not None else None
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

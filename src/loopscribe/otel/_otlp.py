"""OTLP encodings of finished spans, written straight from the spans.

The SDK's encoder builds one protobuf object per span, attribute and value
and then serializes them; for loopscribe's spans (twenty-odd small
attributes each) that costs more than recording the call they describe.
:func:`encode_otlp_protobuf` writes the same ``ExportTraceServiceRequest`` bytes
directly: the same fields, in the same order, with the same defaults left
out, so a receiver cannot tell the two apart (a test holds it to the SDK's
bytes). It takes any ``ReadableSpan``, not only the bridge's.
:func:`encode_otlp_json` writes the OTLP/JSON line that protobuf's JSON
mapping makes of that request, also without building it.

An attribute the protocol cannot carry (a string with a lone surrogate, an
integer beyond 64 bits, an unknown type) is left out and logged, as the SDK's
encoder does.
"""

from __future__ import annotations

import base64
import logging
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, StatusCode

logger = logging.getLogger("loopscribe.otel")

_INT64 = 1 << 63
_UINT64_MASK = (1 << 64) - 1
_SMALL = [bytes((n,)) for n in range(128)]
"""The one-byte varints."""
_KIND = {
    SpanKind.INTERNAL: b"\x30\x01",
    SpanKind.SERVER: b"\x30\x02",
    SpanKind.CLIENT: b"\x30\x03",
    SpanKind.PRODUCER: b"\x30\x04",
    SpanKind.CONSUMER: b"\x30\x05",
}
"""``Span.kind`` (field 6) for each kind."""
_STATUS = {
    code: b"\x7a\x02\x18" + bytes((code.value,)) if code.value else b"\x7a\x00"
    for code in StatusCode
}
"""``Span.status`` (field 15) without a description, for each code."""
_KIND_NUMBER = {kind: encoded[1] for kind, encoded in _KIND.items()}
"""``Span.kind`` as the number OTLP/JSON writes."""
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


def _flags(remote: bool) -> int:
    """``Span.flags`` / ``Link.flags``: whether the other end is remote, and that this is known."""
    return _HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)


_SPAN_FLAGS = {r: b"\x85\x01" + struct.pack("<I", _flags(r)) for r in (False, True)}
"""``Span.flags`` (field 16, fixed32), by whether the parent is remote."""
_LINK_FLAGS = {r: b"\x35" + struct.pack("<I", _flags(r)) for r in (False, True)}
"""``Link.flags`` (field 6, fixed32), by whether the linked span is remote."""
_fixed64 = struct.Struct("<Q").pack
_double = struct.Struct("<d").pack
_KEY_CACHE_LIMIT = 4096
"""Encoded attribute keys kept; a host with more distinct keys only pays to encode them again."""
_KEPT_KINDS = frozenset({str, int, bool})
"""Values kept with their encoding: equal values of these types encode alike (0.0, -0.0 do not)."""
_KEPT_BYTES = 512
"""Only short values are kept (the encoding cache holds one value per key)."""


def _varint(value: int) -> bytes:
    if value < 128:
        return _SMALL[value]
    out = bytearray()
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte(s), the payload's length, the payload."""
    size = len(payload)
    return tag + (_SMALL[size] if size < 128 else _varint(size)) + payload


class _Encoder:
    """Caches what repeats between spans: encoded keys, resources and scopes."""

    def __init__(self) -> None:
        self._keys: dict[str, tuple[bytes, Any, bytes, bytes, bytes]] = {}
        self._resources: dict[int, tuple[Resource, bytes]] = {}
        self._scopes: dict[int, tuple[InstrumentationScope | None, bytes]] = {}

    def request(self, spans: Sequence[ReadableSpan]) -> bytes:
        """One ``ExportTraceServiceRequest``: spans grouped by resource, then by scope."""
        out = []
        for resource, scopes in _grouped(spans).items():
            parts = [self._resource(resource)]
            for scope, members in scopes.items():
                scope_spans = [self._scope(scope)]
                scope_spans.extend(_field(b"\x12", self.span(span)) for span in members)
                if scope is not None and scope.schema_url:
                    scope_spans.append(_field(b"\x1a", scope.schema_url.encode()))
                parts.append(_field(b"\x12", b"".join(scope_spans)))
            if resource.schema_url:
                parts.append(_field(b"\x1a", resource.schema_url.encode()))
            out.append(_field(b"\x0a", b"".join(parts)))
        return b"".join(out)

    def _resource(self, resource: Resource) -> bytes:
        """``ResourceSpans.resource`` (field 1), cached per Resource object."""
        cached = self._resources.get(id(resource))
        if cached is not None and cached[0] is resource:
            return cached[1]
        encoded = _field(b"\x0a", self.attributes(b"\x0a", resource.attributes))
        if len(self._resources) >= 64:
            self._resources.clear()
        self._resources[id(resource)] = (resource, encoded)
        return encoded

    def _scope(self, scope: InstrumentationScope | None) -> bytes:
        """``ScopeSpans.scope`` (field 1), cached per scope object."""
        cached = self._scopes.get(id(scope))
        if cached is not None and cached[0] is scope:
            return cached[1]
        body = b""
        if scope is not None:
            parts = []
            if scope.name:
                parts.append(_field(b"\x0a", scope.name.encode()))
            if scope.version:
                parts.append(_field(b"\x12", scope.version.encode()))
            parts.append(self.attributes(b"\x1a", scope.attributes))
            body = b"".join(parts)
        encoded = _field(b"\x0a", body)
        if len(self._scopes) >= 64:
            self._scopes.clear()
        self._scopes[id(scope)] = (scope, encoded)
        return encoded

    def span(self, span: ReadableSpan) -> bytes:
        """One ``Span`` message's body."""
        context = span.get_span_context()
        if context is None:  # pragma: no cover - a finished SDK span always has one
            raise ValueError(f"span {span.name!r} has no span context")
        parent = span.parent
        parts = [
            b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
            b"\x12\x08" + context.span_id.to_bytes(8, "big"),
        ]
        state = context.trace_state
        if state:
            parts.append(_field(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items()).encode()))
        if parent is not None:
            parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
        if span.name:
            parts.append(_field(b"\x2a", span.name.encode()))
        parts.append(_KIND[span.kind])
        if span.start_time:
            parts.append(b"\x39" + _fixed64(span.start_time))
        if span.end_time:
            parts.append(b"\x41" + _fixed64(span.end_time))
        attributes = span.attributes
        if attributes:
            parts.append(self.attributes(b"\x4a", attributes))
        if span.dropped_attributes:
            parts.append(b"\x50" + _varint(span.dropped_attributes))
        for event in span.events:
            body = []
            if event.timestamp:
                body.append(b"\x09" + _fixed64(event.timestamp))
            if event.name:
                body.append(_field(b"\x12", event.name.encode()))
            if event.attributes:
                body.append(self.attributes(b"\x1a", event.attributes))
            if event.dropped_attributes:
                body.append(b"\x20" + _varint(event.dropped_attributes))
            parts.append(_field(b"\x5a", b"".join(body)))
        if span.dropped_events:
            parts.append(b"\x60" + _varint(span.dropped_events))
        for link in span.links:
            linked = link.context
            body = [
                b"\x0a\x10" + linked.trace_id.to_bytes(16, "big"),
                b"\x12\x08" + linked.span_id.to_bytes(8, "big"),
            ]
            if link.attributes:
                body.append(self.attributes(b"\x22", link.attributes))
            if link.dropped_attributes:
                body.append(b"\x28" + _varint(link.dropped_attributes))
            body.append(_LINK_FLAGS[bool(linked.is_remote)])
            parts.append(_field(b"\x6a", b"".join(body)))
        if span.dropped_links:
            parts.append(b"\x70" + _varint(span.dropped_links))
        status = span.status
        if status is not None:
            if not status.description:
                parts.append(_STATUS[status.status_code])
            else:
                body = [_field(b"\x12", status.description.encode())]
                code = status.status_code.value
                if code:
                    body.append(b"\x18" + _varint(code))
                parts.append(_field(b"\x7a", b"".join(body)))
        parts.append(_SPAN_FLAGS[parent is not None and parent.is_remote])
        return b"".join(parts)

    def attributes(self, tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
        """Each attribute as a ``KeyValue`` field ``tag``; one that cannot be encoded is logged.

        Each key's encoding is kept with the last value it had and that pair's
        encoding: a run's spans repeat most values (session, run, model).
        """
        if not attributes:
            return b""
        keys = self._keys
        small = _SMALL
        parts = []
        for key, value in attributes.items():
            kind = type(value)
            kept = keys.get(key)
            if kept is not None:
                last = kept[1]
                if type(last) is kind and last == value:
                    if kept[3] == tag:
                        parts.append(kept[4])
                        continue
                    body = kept[2]
                    size = len(body)
                    parts.append(tag + (small[size] if size < 128 else _varint(size)) + body)
                    continue
                encoded_key = kept[0]
            else:
                try:
                    encoded_key = _key(key)
                except Exception as exc:
                    logger.error("cannot encode the attribute key %r: %s", key, exc)
                    continue
            try:
                # The common values inline: a short string, a small count, a float.
                if kind is str:
                    text = value.encode()
                    size = len(text)
                    if size < 126:
                        encoded = b"\x12" + small[size + 2] + b"\x0a" + small[size] + text
                    else:
                        encoded = _field(b"\x12", _field(b"\x0a", text))
                elif kind is int and 0 <= value < _INT64:
                    number = small[value] if value < 128 else _varint(value)
                    encoded = b"\x12" + small[len(number) + 1] + b"\x18" + number
                elif kind is bool:
                    encoded = b"\x12\x02\x10\x01" if value else b"\x12\x02\x10\x00"
                elif kind is float:
                    encoded = b"\x12\x09\x21" + _double(value)
                else:
                    encoded = _field(b"\x12", _value(value))
            except Exception as exc:
                logger.error("cannot encode the attribute %r: %s", key, exc)
                continue
            body = encoded_key + encoded
            size = len(body)
            field = tag + (small[size] if size < 128 else _varint(size)) + body
            parts.append(field)
            if (
                kind in _KEPT_KINDS
                and size <= _KEPT_BYTES
                and (kept is not None or len(keys) < _KEY_CACHE_LIMIT)
            ):
                # One tuple, replaced whole: another thread reads a consistent entry.
                keys[key] = (encoded_key, value, body, tag, field)
            elif kept is None and len(keys) < _KEY_CACHE_LIMIT:
                keys[key] = (encoded_key, _NOTHING, b"", b"", b"")
        return b"".join(parts)


def _key(key: str) -> bytes:
    """``KeyValue.key`` (field 1); an empty key is the default, which protobuf leaves out."""
    return _field(b"\x0a", key.encode()) if key != "" else b""


def _grouped(
    spans: Sequence[ReadableSpan],
) -> dict[Resource, dict[InstrumentationScope | None, list[ReadableSpan]]]:
    """Spans by equal Resource, then by equal scope, in order, as the SDK's encoder groups them."""
    groups: dict[Resource, dict[InstrumentationScope | None, list[ReadableSpan]]] = {}
    last_resource: Any = _NOTHING
    last_scope: Any = _NOTHING
    current: list[ReadableSpan] = []
    for span in spans:
        resource = span.resource
        scope = span.instrumentation_scope or None
        # Most batches have one of each: hash a Resource only when it changes.
        if resource is not last_resource or scope is not last_scope:
            current = groups.setdefault(resource, {}).setdefault(scope, [])
            last_resource, last_scope = resource, scope
        current.append(span)
    return groups


_NOTHING = object()


def _value(value: Any) -> bytes:
    """An ``AnyValue`` message's body."""
    kind = type(value)
    if kind is str:
        return _field(b"\x0a", value.encode())
    if kind is int:
        if 0 <= value < _INT64:
            return b"\x18" + _varint(value)
        if value < 0 and value >= -_INT64:
            return b"\x18" + _varint(value & _UINT64_MASK)
        raise ValueError(f"{value} does not fit in 64 bits")
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is float:
        return b"\x21" + _double(value)
    if kind is tuple or kind is list:
        return _field(b"\x2a", b"".join([_field(b"\x0a", _value(item)) for item in value]))
    if value is None:
        return b""
    # Subclasses, in the SDK encoder's order, as the plain values they hold
    # (through the base class's method: a subclass may override __str__).
    if isinstance(value, str):
        return _value(str.__str__(value))
    if isinstance(value, int):
        return _value(int.__int__(value))
    if isinstance(value, float):
        return _value(float.__float__(value))
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _value(list(value))
    if isinstance(value, Mapping):
        return _field(
            b"\x32",
            b"".join(
                [
                    _field(b"\x0a", _key(str(k)) + _field(b"\x12", _value(v)))
                    for k, v in value.items()
                ]
            ),
        )
    raise TypeError(f"a {type(value).__name__} is not an attribute value")


def encode_otlp_protobuf(spans: Sequence[ReadableSpan]) -> bytes:
    """One OTLP ``ExportTraceServiceRequest`` holding ``spans``, as protobuf bytes.

    The bytes the OpenTelemetry SDK's exporters send for the same spans
    (``encode_spans(spans).SerializeToString()``), made several times faster;
    loopscribe's OTLP exporters send these.
    """
    return _ENCODER.request(spans)


_ENCODER = _Encoder()


# -- OTLP/JSON -------------------------------------------------------------------


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """One ``ExportTraceServiceRequest`` in the OTLP/JSON encoding, as one line.

    The encoding the Collector's ``otlpjsonfile`` receiver reads:
    lowerCamelCase keys, hex trace and span IDs, enums as integers, 64-bit
    integers as strings (protobuf's JSON mapping, as the SDK's protobuf
    objects give it, built here directly).

    Args:
        spans: The spans of one request.

    Returns:
        UTF-8 JSON ending in ``\\n``.
    """
    resource_spans = []
    for resource, scopes in _grouped(spans).items():
        scope_spans = []
        for scope, members in scopes.items():
            entry: dict[str, Any] = {"scope": _json_scope(scope)}
            if members:
                entry["spans"] = [_json_span(span) for span in members]
            if scope is not None and scope.schema_url:
                entry["schemaUrl"] = scope.schema_url
            scope_spans.append(entry)
        attributes = _json_attributes(resource.attributes)
        group: dict[str, Any] = {"resource": {"attributes": attributes} if attributes else {}}
        group["scopeSpans"] = scope_spans
        if resource.schema_url:
            group["schemaUrl"] = resource.schema_url
        resource_spans.append(group)
    request = {"resourceSpans": resource_spans} if resource_spans else {}
    return orjson.dumps(request, option=orjson.OPT_APPEND_NEWLINE)


def _json_scope(scope: InstrumentationScope | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if scope is not None:
        if scope.name:
            out["name"] = scope.name
        if scope.version:
            out["version"] = scope.version
        attributes = _json_attributes(scope.attributes)
        if attributes:
            out["attributes"] = attributes
    return out


def _json_span(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    if context is None:  # pragma: no cover - a finished SDK span always has one
        raise ValueError(f"span {span.name!r} has no span context")
    out: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
    }
    state = context.trace_state
    if state:
        out["traceState"] = ",".join(f"{k}={v}" for k, v in state.items())
    parent = span.parent
    if parent is not None:
        out["parentSpanId"] = f"{parent.span_id:016x}"
    if span.name:
        out["name"] = span.name
    out["kind"] = _KIND_NUMBER[span.kind]
    if span.start_time:
        out["startTimeUnixNano"] = str(span.start_time)
    if span.end_time:
        out["endTimeUnixNano"] = str(span.end_time)
    attributes = _json_attributes(span.attributes)
    if attributes:
        out["attributes"] = attributes
    if span.dropped_attributes:
        out["droppedAttributesCount"] = span.dropped_attributes
    if span.events:
        events = []
        for event in span.events:
            encoded: dict[str, Any] = {}
            if event.timestamp:
                encoded["timeUnixNano"] = str(event.timestamp)
            if event.name:
                encoded["name"] = event.name
            event_attributes = _json_attributes(event.attributes)
            if event_attributes:
                encoded["attributes"] = event_attributes
            if event.dropped_attributes:
                encoded["droppedAttributesCount"] = event.dropped_attributes
            events.append(encoded)
        out["events"] = events
    if span.dropped_events:
        out["droppedEventsCount"] = span.dropped_events
    if span.links:
        links = []
        for link in span.links:
            linked = link.context
            encoded = {"traceId": f"{linked.trace_id:032x}", "spanId": f"{linked.span_id:016x}"}
            link_attributes = _json_attributes(link.attributes)
            if link_attributes:
                encoded["attributes"] = link_attributes
            if link.dropped_attributes:
                encoded["droppedAttributesCount"] = link.dropped_attributes
            encoded["flags"] = _flags(linked.is_remote)
            links.append(encoded)
        out["links"] = links
    if span.dropped_links:
        out["droppedLinksCount"] = span.dropped_links
    status = span.status
    if status is not None:
        encoded = {}
        if status.description:
            encoded["message"] = status.description
        if status.status_code.value:
            encoded["code"] = status.status_code.value
        out["status"] = encoded
    out["flags"] = _flags(parent is not None and parent.is_remote)
    return out


def _json_attributes(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``KeyValue`` objects; one the protocol cannot carry is logged and left out."""
    if not attributes:
        return []
    out = []
    for key, value in attributes.items():
        try:
            out.append(_json_pair(key, value))
        except Exception as exc:
            logger.error("cannot encode the attribute %r: %s", key, exc)
    return out


def _json_pair(key: str, value: Any) -> dict[str, Any]:
    """A ``KeyValue`` object; an empty key is the default, which protobuf leaves out."""
    if not key.isascii():
        key.encode()  # raises for a lone surrogate, which cannot be sent
    encoded = _json_value(value)
    return {"key": key, "value": encoded} if key else {"value": encoded}


def _json_value(value: Any) -> dict[str, Any]:
    """An ``AnyValue`` object; raises where :func:`_value` does."""
    kind = type(value)
    if kind is str:
        if not value.isascii():
            value.encode()  # raises for a lone surrogate, which cannot be sent
        return {"stringValue": value}
    if kind is int:
        if not -_INT64 <= value < _INT64:
            raise ValueError(f"{value} does not fit in 64 bits")
        return {"intValue": str(value)}
    if kind is bool:
        return {"boolValue": value}
    if kind is float:
        if math.isfinite(value):
            return {"doubleValue": value}
        return {
            "doubleValue": "NaN" if math.isnan(value) else str(value).replace("inf", "Infinity")
        }
    if kind is tuple or kind is list:
        values = [_json_value(item) for item in value]
        return {"arrayValue": {"values": values} if values else {}}
    if value is None:
        return {}
    if isinstance(value, str):
        return _json_value(str.__str__(value))
    if isinstance(value, int):
        return _json_value(int.__int__(value))
    if isinstance(value, float):
        return _json_value(float.__float__(value))
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, Sequence):
        return _json_value(list(value))
    if isinstance(value, Mapping):
        pairs = [_json_pair(str(k), v) for k, v in value.items()]
        return {"kvlistValue": {"values": pairs} if pairs else {}}
    raise TypeError(f"a {type(value).__name__} is not an attribute value")

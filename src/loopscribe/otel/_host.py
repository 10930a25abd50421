"""Spans the host's own instrumentation made, kept in a record and emitted again as they were.

The intake (``loopscribe.intake``) records the operations of spans that an
OpenTelemetry, OpenInference or OpenLLMetry instrumentation created, and
hands them on without their bodies. Those spans already have an identity in
the host's trace backend; loopscribe gives them no second one:

* their executions are named after the span (``otel:<span id>``, see
  :func:`~loopscribe.otel.host_execution_id`), so every span ID loopscribe
  computes for them is the host's;
* the last record of such an execution, ``host_span``, holds the span as it
  was handed on: name, IDs, parent, kind, times, status, attributes (bodies
  removed, references added), events, links, resource and scope, with the
  counts of what the SDK's limits dropped. :func:`span_from_record_data`
  rebuilds exactly that span, which is what the bridge emits for it; a run
  holding such executions emits no span of its own (the host's trace has
  its root already).

Attribute values keep their types through JSON: strings, booleans, integers
and finite floats are themselves, sequences are lists (read back as
tuples), and what JSON cannot say is tagged in a one-key object (the only
objects a value can hold): ``{"float": "nan"}``, ``{"bytes": "<base64>"}``,
``{"int": "<decimal>"}`` beyond 64 bits, ``{"map": {...}}``.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

import orjson
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

HOST_SPAN: Final = "host_span"
"""The record type that holds a host's span as the intake handed it on."""

_INT64: Final = 1 << 63
_FLOATS: Final = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _value(value: Any) -> Any:
    """An attribute value as JSON that reads back to the same value and type."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else {"int": str(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, Mapping):
        return {"map": {str(k): _value(v) for k, v in value.items()}}
    if isinstance(value, Sequence):
        return [_value(v) for v in value]
    return str(value)


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {} if not attributes else {k: _value(v) for k, v in attributes.items()}


def _read_value(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_read_value(v) for v in value)
    if isinstance(value, dict):
        if len(value) != 1:
            raise ValueError(f"an attribute value object has one key, got {sorted(value)}")
        tag, inner = next(iter(value.items()))
        if tag == "float" and inner in _FLOATS:
            return _FLOATS[inner]
        if tag == "bytes" and isinstance(inner, str):
            return base64.b64decode(inner)
        if tag == "int" and isinstance(inner, str):
            return int(inner)
        if tag == "map" and isinstance(inner, dict):
            return {k: _read_value(v) for k, v in inner.items()}
        raise ValueError(f"unknown attribute value tag {tag!r}")
    return value


def _read_attributes(obj: Any, dropped: int = 0) -> BoundedAttributes:
    if not isinstance(obj, dict):
        raise ValueError(f"attributes are an object, got {type(obj).__name__}")
    attributes = BoundedAttributes(None, {k: _read_value(v) for k, v in obj.items()})
    attributes.dropped = dropped
    return attributes


def _context(ctx: SpanContext) -> dict[str, Any]:
    out: dict[str, Any] = {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "flags": int(ctx.trace_flags),
    }
    if ctx.is_remote:
        out["remote"] = True
    if ctx.trace_state:
        out["state"] = [[k, v] for k, v in ctx.trace_state.items()]
    return out


def _read_context(obj: Any) -> SpanContext:
    if not isinstance(obj, dict):
        raise ValueError("a span context is an object")
    state = obj.get("state") or []
    return SpanContext(
        int(obj["trace_id"], 16),
        int(obj["span_id"], 16),
        bool(obj.get("remote", False)),
        TraceFlags(int(obj.get("flags", 0))),
        TraceState([(str(k), str(v)) for k, v in state]),
    )


def _dropped(span: ReadableSpan) -> dict[str, int]:
    counts = {
        "attributes": span.dropped_attributes,
        "events": span.dropped_events,
        "links": span.dropped_links,
    }
    return {k: v for k, v in counts.items() if v}


def span_record_data(
    span: ReadableSpan,
    attributes: Mapping[str, Any] | None = None,
    events: Sequence[Event] | None = None,
) -> dict[str, Any]:
    """The ``host_span`` record data of ``span``, with these attributes and events.

    Args:
        span: The finished span as the host's SDK made it.
        attributes: What the span is handed on with; default its own.
        events: Likewise for its events.

    Returns:
        JSON-compatible data that :func:`span_from_record_data` turns back
        into the span, with ``attributes`` and ``events``.
    """
    ctx = span.context
    if ctx is None:
        raise ValueError(f"span {span.name!r} has no span context")
    data: dict[str, Any] = {
        "name": span.name,
        "context": _context(ctx),
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
    }
    if span.parent is not None:
        data["parent"] = _context(span.parent)
    status = span.status
    if status.status_code is not StatusCode.UNSET:
        data["status"] = {"code": status.status_code.name}
        if status.description:
            data["status"]["description"] = status.description
    data["attributes"] = _attributes(span.attributes if attributes is None else attributes)
    kept = span.events if events is None else events
    if kept:
        data["events"] = [_event(e) for e in kept]
    if span.links:
        data["links"] = [_link(link) for link in span.links]
    dropped = _dropped(span)
    if dropped:
        data["dropped"] = dropped
    data["resource"] = _resource(span.resource)
    scope = span.instrumentation_scope
    if scope is not None:
        data["scope"] = _scope(scope)
    return data


def _event(event: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"name": event.name, "time_ns": event.timestamp}
    if event.attributes:
        out["attributes"] = _attributes(event.attributes)
    dropped = getattr(event, "dropped_attributes", 0)
    if dropped:
        out["dropped"] = dropped
    return out


def _link(link: Link) -> dict[str, Any]:
    out: dict[str, Any] = {"context": _context(link.context)}
    if link.attributes:
        out["attributes"] = _attributes(link.attributes)
    dropped = getattr(link, "dropped_attributes", 0)
    if dropped:
        out["dropped"] = dropped
    return out


def _resource(resource: Resource) -> dict[str, Any]:
    out: dict[str, Any] = {"attributes": _attributes(resource.attributes)}
    if resource.schema_url:
        out["schema_url"] = resource.schema_url
    return out


def _scope(scope: InstrumentationScope) -> dict[str, Any]:
    out: dict[str, Any] = {"name": scope.name}
    if scope.version:
        out["version"] = scope.version
    if scope.schema_url:
        out["schema_url"] = scope.schema_url
    if scope.attributes:
        out["attributes"] = _attributes(scope.attributes)
    return out


@lru_cache(maxsize=64)
def _cached_resource(frozen: str) -> Resource:
    """A Resource from its stored JSON text: a replay has few, and spans share them."""
    obj = orjson.loads(frozen)
    return Resource(_read_attributes(obj.get("attributes", {})), obj.get("schema_url") or None)


def _read_resource(obj: Any) -> Resource:
    if not isinstance(obj, dict):
        raise ValueError("a resource is an object")
    return _cached_resource(orjson.dumps(obj).decode())


def _read_scope(obj: Any) -> InstrumentationScope | None:
    if obj is None:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError("an instrumentation scope is an object with a name")
    attributes = obj.get("attributes")
    return InstrumentationScope(
        obj["name"],
        obj.get("version"),
        obj.get("schema_url"),
        None if attributes is None else _read_attributes(attributes),
    )


def span_from_record_data(data: Mapping[str, Any]) -> ReadableSpan:
    """The span a ``host_span`` record holds, exactly as it was handed on.

    Raises:
        ValueError: The data is not a stored span (a damaged or hand-made record).
    """
    try:
        dropped = data.get("dropped") or {}
        events: BoundedList[Event] = BoundedList(None)
        for e in data.get("events") or ():
            events.append(
                Event(
                    e["name"],
                    _read_attributes(e.get("attributes", {}), e.get("dropped", 0)),
                    e["time_ns"],
                )
            )
        events.dropped = dropped.get("events", 0)
        links: BoundedList[Link] = BoundedList(None)
        for link in data.get("links") or ():
            links.append(
                Link(
                    _read_context(link["context"]),
                    _read_attributes(link.get("attributes", {}), link.get("dropped", 0)),
                )
            )
        links.dropped = dropped.get("links", 0)
        status = data.get("status")
        parent = data.get("parent")
        return ReadableSpan(
            name=str(data["name"]),
            context=_read_context(data["context"]),
            parent=None if parent is None else _read_context(parent),
            resource=_read_resource(data.get("resource", {})),
            attributes=_read_attributes(data.get("attributes", {}), dropped.get("attributes", 0)),
            events=events,
            links=links,
            kind=SpanKind[data.get("kind", "INTERNAL")],
            status=(
                Status(StatusCode[status["code"]], status.get("description"))
                if isinstance(status, dict)
                else Status(StatusCode.UNSET)
            ),
            start_time=int(data["start_ns"]),
            end_time=int(data["end_ns"]),
            instrumentation_scope=_read_scope(data.get("scope")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"not a stored span: {exc!r}") from exc

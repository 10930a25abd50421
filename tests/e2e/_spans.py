"""Spans as an OTLP JSON lines file holds them and as Jaeger's query API returns them.

Both sides are reduced to one shape, :class:`Span` (IDs, parent, name,
kind, attributes as text), so a test compares what a file says with what
Jaeger stored without caring how either encodes it.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._stack import ARRIVAL_TIMEOUT_S, Jaeger, wait_for

# OTLP's SpanKind numbers and the ``span.kind`` tag Jaeger's API shows for them.
KINDS = {0: None, 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
OTLP_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}

COLLECTOR_ADDED = frozenset({"log.file.name"})
"""Attributes the Collector's file receiver adds to every span it reads: the file's name."""

# Tags Jaeger adds from the OTLP span's own fields, not from its attributes.
JAEGER_SPAN_FIELD_TAGS = frozenset(
    {
        "span.kind",
        "otel.scope.name",
        "otel.scope.version",
        "otel.status_code",
        "otel.status_description",
        "error",
        "w3c.tracestate",
        "internal.span.format",
    }
)


@dataclass(frozen=True, slots=True)
class Span:
    """One span, reduced to what both sides can say."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str | None
    attributes: Mapping[str, str]


def _hex_id(raw: str, size: int) -> str:
    """OTLP JSON IDs are hex; tolerate base64 (the protobuf JSON mapping) as well."""
    if len(raw) == size * 2:
        return raw.lower()
    return base64.b64decode(raw).hex()


def _otlp_value(value: Mapping[str, Any]) -> str:
    if "stringValue" in value:
        return str(value["stringValue"])
    if "intValue" in value:
        return str(int(value["intValue"]))
    if "boolValue" in value:
        return "true" if value["boolValue"] else "false"
    if "doubleValue" in value:
        return repr(float(value["doubleValue"]))
    return json.dumps(value, sort_keys=True)


def _kind(raw: object) -> str | None:
    number = OTLP_KIND_NAMES[raw] if isinstance(raw, str) else int(raw or 0)  # type: ignore[call-overload]
    return KINDS[number]


def spans_of_request(request: Mapping[str, Any]) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest`` in OTLP JSON."""
    out = []
    for resource_spans in request.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for raw in scope_spans.get("spans", []):
                parent = raw.get("parentSpanId") or None
                out.append(
                    Span(
                        trace_id=_hex_id(raw["traceId"], 16),
                        span_id=_hex_id(raw["spanId"], 8),
                        parent_id=_hex_id(parent, 8) if parent else None,
                        name=raw["name"],
                        kind=_kind(raw.get("kind", 0)),
                        attributes={
                            a["key"]: _otlp_value(a.get("value", {}))
                            for a in raw.get("attributes", [])
                        },
                    )
                )
    return out


def spans_of_file(path: Path) -> list[Span]:
    """Every span in an OTLP JSON lines file (complete lines only)."""
    out: list[Span] = []
    with path.open("rb") as f:
        for line in f:
            if line.endswith(b"\n") and line.strip():
                out.extend(spans_of_request(json.loads(line)))
    return out


def _jaeger_value(tag: Mapping[str, Any]) -> str:
    value = tag["value"]
    if tag.get("type") == "bool":
        return "true" if value else "false"
    if tag.get("type") == "float64":
        return repr(float(value))
    return str(value)


def spans_of_jaeger(trace: Mapping[str, Any]) -> list[Span]:
    """The spans of one trace from Jaeger's ``/api/traces/{id}``."""
    out = []
    for raw in trace["spans"]:
        parents = [r["spanID"] for r in raw.get("references", []) if r["refType"] == "CHILD_OF"]
        assert len(parents) <= 1, f"span {raw['spanID']} has parents {parents}"
        tags = {t["key"]: _jaeger_value(t) for t in raw.get("tags", [])}
        out.append(
            Span(
                trace_id=raw["traceID"].rjust(32, "0"),
                span_id=raw["spanID"].rjust(16, "0"),
                parent_id=parents[0].rjust(16, "0") if parents else None,
                name=raw["operationName"],
                kind=tags.get("span.kind"),
                attributes={k: v for k, v in tags.items() if k not in JAEGER_SPAN_FIELD_TAGS},
            )
        )
    return out


def jaeger_spans(jaeger: Jaeger, trace_ids: Iterable[str]) -> list[Span]:
    """Every span Jaeger holds for these traces (duplicates kept)."""
    out: list[Span] = []
    for trace_id in sorted(set(trace_ids)):
        trace = jaeger.trace(trace_id)
        if trace is not None:
            out.extend(spans_of_jaeger(trace))
    return out


def wait_for_spans(jaeger: Jaeger, expected: Iterable[Span], *, extra: str = "") -> list[Span]:
    """Jaeger's spans of the expected traces, once every expected span ID is there."""
    want = {(s.trace_id, s.span_id) for s in expected}
    traces = {trace for trace, _ in want}

    def arrived() -> list[Span] | None:
        jaeger.program.check_alive()
        got = jaeger_spans(jaeger, traces)
        return got if want <= {(s.trace_id, s.span_id) for s in got} else None

    def detail() -> str:
        got = {(s.trace_id, s.span_id) for s in jaeger_spans(jaeger, traces)}
        return f"{len(want - got)} of {len(want)} spans missing\n{extra}"

    return wait_for(
        f"{len(want)} spans in Jaeger", arrived, timeout_s=ARRIVAL_TIMEOUT_S, detail=detail
    )


def assert_same_spans(stored: list[Span], expected: list[Span]) -> None:
    """Jaeger holds each expected span exactly once, equal to the file's, and nothing else."""
    counts = Counter((s.trace_id, s.span_id) for s in stored)
    twice = {key: n for key, n in counts.items() if n > 1}
    assert not twice, f"spans stored more than once: {twice}"
    want = {(s.trace_id, s.span_id): s for s in expected}
    assert len(want) == len(expected), "the file itself holds a span twice"
    got = {(s.trace_id, s.span_id): s for s in stored}
    assert got.keys() == want.keys(), (
        f"missing {sorted(want.keys() - got.keys())}, unexpected {sorted(got.keys() - want.keys())}"
    )
    for key, span in want.items():
        other = got[key]
        assert other.parent_id == span.parent_id, f"{key}: parent"
        assert other.name == span.name, f"{key}: name"
        assert other.kind == span.kind, f"{key} {span.name}: kind {other.kind} != {span.kind}"
        for name, value in span.attributes.items():
            assert name in other.attributes, f"{key} {span.name}: attribute {name} missing"
            if not value.startswith("{"):  # arrays and maps: Jaeger flattens them to JSON text
                assert other.attributes[name] == value, f"{key} {span.name}: {name}"
        made_up = other.attributes.keys() - span.attributes.keys() - COLLECTOR_ADDED
        assert not made_up, f"{key}: attributes that are not the file's: {made_up}"


def tree(spans: Iterable[Span]) -> dict[str, str | None]:
    """Each span ID's parent ID."""
    return {s.span_id: s.parent_id for s in spans}

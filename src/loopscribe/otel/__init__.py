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
"""

from ._bridge import TERMINAL_TYPES, SpanBridge, default_resource, replay, to_file_uri
from ._export import (
    OTLPJsonFileExporter,
    default_export_path,
    default_exporter,
    default_processor,
    describe_destination,
)
from ._genai import MessageReferenceError, parse_reference, resolve_reference
from ._ids import run_span_id, span_context, span_id, trace_id
from ._otlp import encode_otlp_json, encode_otlp_protobuf

__all__ = [
    "TERMINAL_TYPES",
    "MessageReferenceError",
    "OTLPJsonFileExporter",
    "SpanBridge",
    "default_export_path",
    "default_exporter",
    "default_processor",
    "default_resource",
    "describe_destination",
    "encode_otlp_json",
    "encode_otlp_protobuf",
    "parse_reference",
    "replay",
    "resolve_reference",
    "run_span_id",
    "span_context",
    "span_id",
    "to_file_uri",
    "trace_id",
]

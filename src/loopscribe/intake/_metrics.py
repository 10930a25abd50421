"""The GenAI metrics of the host's spans, live, without counting twice.

The official GenAI instrumentations (util-genai) and OpenLLMetry record
``gen_ai.client.token.usage`` and the duration histograms themselves;
OpenInference's record none. So by default the
:class:`~._processor.OffloadingProcessor` measures only OpenInference spans
(those with ``openinference.span.kind``); ``metrics=True`` measures every
GenAI span it takes in, ``metrics=False`` none.

A span is read into the conventions' attributes (:func:`genai_attributes`)
and measured by ``loopscribe.otel``'s own code, so the instruments, names,
buckets and the ``LOOPSCRIBE_GENAI_SEMCONV`` switch are the bridge's:

=====================================  =====================================================
OpenInference                          measured as
=====================================  =====================================================
``openinference.span.kind``            ``LLM``: ``chat``; ``EMBEDDING``: ``embeddings``;
                                       ``TOOL``: ``execute_tool``; ``AGENT``: ``invoke_agent``
``llm.provider`` / ``llm.system``      ``gen_ai.provider.name`` (the conventions' value)
``llm.model_name``                     request and response model
``llm.token_count.prompt`` /           input / output tokens (cache and reasoning included)
``.completion``
``llm.token_count.prompt_details.*``,  cache read / write, reasoning
``.completion_details.reasoning``
the ``First Token Stream Event`` event time to first chunk (its time after the span's start)
``tool.name``, ``agent.name``          ``gen_ai.tool.name``, ``gen_ai.agent.name``
status ``ERROR``                       ``error.type`` (the attribute, the exception's type,
                                       else ``_OTHER``)
=====================================  =====================================================

A value that is not what the convention says (a negative, fractional,
huge or non-numeric token count, a model that is not text) is left out;
nothing here raises into the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from .._fields import provider_name
from ._openinference import KIND

OPENINFERENCE_OPERATIONS: Final = {
    "LLM": "chat",
    "EMBEDDING": "embeddings",
    "TOOL": "execute_tool",
    "AGENT": "invoke_agent",
}
"""The GenAI operation of each OpenInference span kind that has one."""
FIRST_TOKEN_EVENT: Final = "First Token Stream Event"
"""The event OpenInference adds to a streamed call's span when its first chunk arrives."""

_OPENLLMETRY_OPERATIONS: Final = {
    "chat": "chat",
    "completion": "text_completion",
    "embedding": "embeddings",
}
_TRACELOOP_OPERATIONS: Final = {"tool": "execute_tool", "agent": "invoke_agent"}
_INT64: Final = 1 << 63
_TOKENS: Final = (
    (
        "gen_ai.usage.input_tokens",
        ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"),
    ),
    (
        "gen_ai.usage.output_tokens",
        (
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
        ),
    ),
    (
        "gen_ai.usage.cache_read.input_tokens",
        ("gen_ai.usage.cache_read.input_tokens", "llm.token_count.prompt_details.cache_read"),
    ),
    (
        "gen_ai.usage.cache_write.input_tokens",
        (
            "gen_ai.usage.cache_write.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",
            "llm.token_count.prompt_details.cache_write",
        ),
    ),
    (
        "gen_ai.usage.reasoning.output_tokens",
        (
            "gen_ai.usage.reasoning.output_tokens",
            "llm.token_count.completion_details.reasoning",
        ),
    ),
)


def measured_by_default(attributes: Mapping[str, Any]) -> bool:
    """Whether a span's instrumentation records no GenAI metrics of its own (OpenInference)."""
    return KIND in attributes


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _first_text(attributes: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = _text(attributes.get(key))
        if value is not None:
            return value
    return None


def _tokens(value: Any) -> int | None:
    """A token count OTLP can carry: a whole number from 0 to 2**63 - 1, never a bool."""
    if type(value) is float and value.is_integer():
        value = int(value)
    return value if type(value) is int and 0 <= value < _INT64 else None


def _operation(attributes: Mapping[str, Any]) -> str | None:
    kind = attributes.get(KIND)
    if isinstance(kind, str):
        return OPENINFERENCE_OPERATIONS.get(kind.upper())
    operation = _text(attributes.get("gen_ai.operation.name"))
    if operation is not None:
        return operation
    request = attributes.get("llm.request.type")
    if isinstance(request, str) and request in _OPENLLMETRY_OPERATIONS:
        return _OPENLLMETRY_OPERATIONS[request]
    traceloop = attributes.get("traceloop.span.kind")
    return _TRACELOOP_OPERATIONS.get(traceloop) if isinstance(traceloop, str) else None


def _error_type(span: ReadableSpan, attributes: Mapping[str, Any]) -> str | None:
    declared = _text(attributes.get("error.type"))
    if declared is not None or span.status.status_code is not StatusCode.ERROR:
        return declared
    for event in span.events:
        if event.name == "exception":
            kind = _text((event.attributes or {}).get("exception.type"))
            if kind is not None:
                return kind
    return "_OTHER"


def _first_chunk_s(span: ReadableSpan, attributes: Mapping[str, Any]) -> float | None:
    declared = attributes.get("gen_ai.response.time_to_first_chunk")
    if (type(declared) is float or type(declared) is int) and 0 <= declared < _INT64:
        return float(declared)
    start = span.start_time
    if start is None:
        return None
    for event in span.events:
        if event.name == FIRST_TOKEN_EVENT:
            return max(0, event.timestamp - start) / 1e9
    return None


def genai_attributes(span: ReadableSpan) -> dict[str, Any] | None:
    """The conventions' attributes ``loopscribe.otel`` measures a span by; ``None`` if no operation.

    Read from whichever convention the span follows (OpenInference, the
    OpenTelemetry GenAI conventions, OpenLLMetry's older attributes).
    """
    # One plain dict for every lookup: a miss on the SDK's mapping raises and catches.
    attributes = dict(span.attributes or {})
    operation = _operation(attributes)
    if operation is None:
        return None
    out: dict[str, Any] = {"gen_ai.operation.name": operation}
    error = _error_type(span, attributes)
    if error is not None:
        out["error.type"] = error
    if operation == "execute_tool":
        tool = _first_text(attributes, "gen_ai.tool.name", "tool.name") or _text(span.name)
        if tool is not None:
            out["gen_ai.tool.name"] = tool
        tool_type = _text(attributes.get("gen_ai.tool.type"))
        if tool_type is not None:
            out["gen_ai.tool.type"] = tool_type
        return out
    provider = provider_name(
        _first_text(
            attributes, "gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"
        )
    )
    if provider is not None:
        out["gen_ai.provider.name"] = provider
    model = _first_text(
        attributes, "gen_ai.request.model", "llm.model_name", "embedding.model_name"
    )
    if model is not None:
        out["gen_ai.request.model"] = model
    if operation == "invoke_agent":
        agent = _first_text(attributes, "gen_ai.agent.name", "agent.name") or _text(span.name)
        if agent is not None:
            out["gen_ai.agent.name"] = agent
        return out
    response_model = _first_text(attributes, "gen_ai.response.model", "llm.model_name")
    if response_model is not None:
        out["gen_ai.response.model"] = response_model
    address = _text(attributes.get("server.address"))
    if address is not None:
        out["server.address"] = address
    port = attributes.get("server.port")
    if type(port) is int and 0 < port < 65536:
        out["server.port"] = port
    for name, keys in _TOKENS:
        for key in keys:
            count = _tokens(attributes.get(key))
            if count is not None:
                out[name] = count
                break
    first_chunk = _first_chunk_s(span, attributes)
    if first_chunk is not None:
        out["gen_ai.response.time_to_first_chunk"] = first_chunk
    return out


def measured_span(span: ReadableSpan) -> ReadableSpan | None:
    """The span as ``loopscribe.otel`` measures it: its IDs and times, the conventions' labels."""
    attributes = genai_attributes(span)
    if attributes is None:
        return None
    return ReadableSpan(
        name=span.name,
        context=span.context,
        resource=span.resource,  # without one, the SDK runs its resource detectors
        attributes=attributes,
        start_time=span.start_time,
        end_time=span.end_time,
    )

"""From a span's attributes to the events loopscribe records, and the references back.

Pure functions, shared by the span processor, the log record processor and
the completion hook:

* :func:`collect` runs each convention's reader over a span's attributes
  and events into one :class:`~._found.Found`;
* :func:`labels` reads the labels (model, provider, token counts, tool,
  agent, request parameters, error) that stay on the span but that the
  records name too;
* :func:`plan` turns both into the execution's events, by kind:

  ==============  ==========================================================
  kind            records (at the span's start, then at its end)
  ==============  ==========================================================
  ``model``       ``model_request`` (messages, system, tools, config);
                  ``model_exec_end`` (the reply, usage, stop reason, error)
  ``embedding``   ``model_request`` (the texts); ``model_exec_end`` (vectors)
  ``tool``        ``tool_exec_start`` (arguments); ``tool_exec_end`` (result)
  ``retrieval``   ``tool_exec_start`` (query, ``tool_type="datastore"``);
                  ``tool_exec_end`` (documents)
  ``agent``,      ``agent_start`` (input); ``agent_end`` (output, error)
  ``other``
  ==============  ==========================================================

  What a convention holds beyond messages is kept under ``otel`` in the
  record of its side, and what was wrong with a body under ``problems``;
* :func:`references` names the written records on the span: the
  conventions' ``gen_ai.*_ref`` attributes where they apply, and
  ``loopscribe.session.id``, ``loopscribe.run.id``,
  ``loopscribe.seq.first`` / ``.last`` and ``loopscribe.file`` on every one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from .. import events as ev
from .._messages import AssistantMessage, SystemMessage, Usage, UserMessage
from .._model import Event, Execution
from . import _openinference, _openllmetry, _otel_genai
from ._found import (
    ABSENT,
    AGENT,
    EMBEDDING,
    MODEL,
    OTHER,
    RETRIEVAL,
    TOOL,
    Found,
    Message,
    maybe_json,
    plain,
    text,
)

INPUT_MESSAGES_REF: Final = "gen_ai.input.messages_ref"
OUTPUT_MESSAGES_REF: Final = "gen_ai.output.messages_ref"
SYSTEM_INSTRUCTIONS_REF: Final = "gen_ai.system_instructions_ref"
TOOL_DEFINITIONS_REF: Final = "gen_ai.tool.definitions_ref"
LS_SESSION_ID: Final = "loopscribe.session.id"
LS_RUN_ID: Final = "loopscribe.run.id"
LS_ATTEMPT: Final = "loopscribe.attempt"
LS_SEQ_FIRST: Final = "loopscribe.seq.first"
LS_SEQ_LAST: Final = "loopscribe.seq.last"
LS_FILE: Final = "loopscribe.file"

CONTENT_KEYS: Final = (
    _otel_genai.CONTENT_KEYS | _openinference.CONTENT_KEYS | _openllmetry.CONTENT_KEYS
)
"""Attribute keys any of whose presence marks a span as carrying a body (the fast test)."""
CONTENT_EVENTS: Final = _otel_genai.CONTENT_EVENTS

_MARKED: Final = (
    (_openinference.CONTENT_KEYS | {_openinference.KIND}, _openinference.read),
    (
        _openllmetry.CONTENT_KEYS | {"traceloop.span.kind", "llm.request.type"},
        _openllmetry.read,
    ),
)

_CONTENT_PREFIXES: Final = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.tools.",
    "llm.prompts",
    "llm.choices",
    "llm.prompt_template.",
    "retrieval.documents.",
    "reranker.",
    "embedding.embeddings.",
    "input.",
    "output.",
    "llm.request.functions.",
    "traceloop.entity.input",
    "traceloop.entity.output",
)
_CONTENT_EXACT: Final = CONTENT_KEYS | {"tool.parameters", "llm.function_call"}


def is_content_key(key: str, *, event: bool = False) -> bool:
    """Whether an attribute key (or an event name) is one any convention keeps a body in.

    Wider than what the readers take (``input.mime_type`` is not a body): the
    test for removing bodies when reading a span failed.
    """
    if event:
        return key in CONTENT_EVENTS
    return key in _CONTENT_EXACT or key.startswith(_CONTENT_PREFIXES)


_PARAMS: Final = {
    "gen_ai.request.temperature": "temperature",
    "gen_ai.request.max_tokens": "max_tokens",
    "gen_ai.request.top_p": "top_p",
    "gen_ai.request.top_k": "top_k",
    "gen_ai.request.frequency_penalty": "frequency_penalty",
    "gen_ai.request.presence_penalty": "presence_penalty",
    "gen_ai.request.stop_sequences": "stop_sequences",
    "gen_ai.request.seed": "seed",
    "gen_ai.request.choice.count": "n",
}


def carries_content(attributes: Mapping[str, Any], events: Sequence[Any]) -> bool:
    """Whether a span may carry a body: the test every span goes through, kept cheap.

    It looks for the attributes each convention always sets with a body, and
    for content events; :func:`collect` then reads the span in full. A
    ``gen_ai.prompt.variable.*`` attribute alone is found by :func:`collect`
    only, on a span that is read for another reason.
    """
    if attributes and not CONTENT_KEYS.isdisjoint(attributes):
        return True
    return any(getattr(e, "name", None) in CONTENT_EVENTS for e in events)


def collect(attributes: Mapping[str, Any], events: Sequence[Any]) -> Found:
    """What every convention finds of an operation in a span's attributes and events.

    OpenInference and OpenLLMetry are read only when one of their marks is
    there (their span kind, or an attribute they always set with a body).
    """
    found = Found()
    _otel_genai.read(attributes, events, found)
    for marks, read in _MARKED:
        if not marks.isdisjoint(attributes):
            read(attributes, events, found)
    return found


# -- labels: what stays on the span, and the records name too -----------------------------


def _first(attributes: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None:
            return value
    return None


def _count(value: Any) -> int | None:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


@dataclass(slots=True)
class Labels:
    """An operation's labels, read from the attributes that stay on the span."""

    model: str | None = None
    response_model: str | None = None
    provider: str | None = None
    response_id: str | None = None
    stream: bool | None = None
    server_address: str | None = None
    server_port: int | None = None
    usage: Usage | None = None
    stop_reason: str | None = None
    tool: str | None = None
    tool_call_id: str | None = None
    tool_type: str | None = None
    tool_description: str | None = None
    agent: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None


def labels(
    attributes: Mapping[str, Any], *, error: bool = False, description: str | None = None
) -> Labels:
    """The labels of an operation; ``error`` and ``description`` from the span's status."""
    out = Labels(
        model=text(
            _first(
                attributes,
                "gen_ai.request.model",
                "llm.request.model_name",
                "llm.model_name",
                "embedding.model_name",
                "gen_ai.response.model",
            )
        ),
        response_model=text(
            _first(attributes, "gen_ai.response.model", "llm.response.model_name", "llm.model_name")
        ),
        provider=text(
            _first(
                attributes, "gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"
            )
        ),
        response_id=text(attributes.get("gen_ai.response.id")),
        server_address=text(attributes.get("server.address")),
        server_port=_count(attributes.get("server.port")),
        tool=text(_first(attributes, "gen_ai.tool.name", "tool.name")),
        tool_call_id=text(_first(attributes, "gen_ai.tool.call.id", "tool_call.id", "tool.id")),
        tool_type=text(attributes.get("gen_ai.tool.type")),
        tool_description=text(_first(attributes, "gen_ai.tool.description", "tool.description")),
        agent=text(_first(attributes, "gen_ai.agent.name", "agent.name")),
    )
    stream = _first(attributes, "gen_ai.request.stream", "gen_ai.is_streaming", "llm.is_streaming")
    out.stream = stream if isinstance(stream, bool) else None
    counts = [
        _count(_first(attributes, *keys))
        for keys in (
            ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"),
            (
                "gen_ai.usage.output_tokens",
                "gen_ai.usage.completion_tokens",
                "llm.token_count.completion",
            ),
            (
                "gen_ai.usage.cache_read.input_tokens",
                "llm.token_count.prompt_details.cache_read",
            ),
            (
                "gen_ai.usage.cache_creation.input_tokens",
                "llm.token_count.prompt_details.cache_write",
            ),
            (
                "gen_ai.usage.reasoning.output_tokens",
                "llm.token_count.completion_details.reasoning",
            ),
        )
    ]
    if any(c is not None for c in counts):
        out.usage = Usage(*(c or 0 for c in counts))
    reasons = _first(attributes, "gen_ai.response.finish_reasons", "llm.finish_reason")
    if isinstance(reasons, list | tuple):
        reasons = next((r for r in reasons if isinstance(r, str) and r), None)
    out.stop_reason = text(reasons)
    params = maybe_json(attributes.get("llm.invocation_parameters"))
    if isinstance(params, dict):
        out.config.update(params)
    for key, name in _PARAMS.items():
        value = attributes.get(key)
        if value is not None:
            out.config[name] = plain(value)
    if error:
        kind = text(attributes.get("error.type")) or "_OTHER"
        out.error = {"type": kind, "message": description or ""}
    return out


def exception_error(events: Sequence[Any]) -> dict[str, Any] | None:
    """The error an ``exception`` span event records (type and message), if any."""
    for event in events:
        if getattr(event, "name", None) == "exception":
            attributes = getattr(event, "attributes", None) or {}
            return {
                "type": text(attributes.get("exception.type")) or "_OTHER",
                "message": str(attributes.get("exception.message") or ""),
            }
    return None


# -- the records of one execution ---------------------------------------------------------


@dataclass(slots=True)
class Plan:
    """The events of one execution, and which of them each reference names.

    ``refs`` maps a ``gen_ai.*_ref`` attribute to the index of its event in
    ``start + end``.
    """

    start: list[Event]
    end: list[Event]
    refs: dict[str, int] = field(default_factory=dict)


def kind_of(found: Found) -> str:
    """The execution kind: the convention's, else a model call if there are messages."""
    if found.kind is not None:
        return found.kind
    return MODEL if found.inputs or found.outputs else OTHER


def _value(value: Any) -> Any:
    return None if value is ABSENT else value


def _extras(data: dict[str, Any], kept: Mapping[str, Any]) -> dict[str, Any]:
    if kept:
        data["otel"] = dict(kept)
    return data


def plan(
    found: Found,
    lab: Labels,
    execution: Execution,
    name: str,
    start: datetime,
    end: datetime,
) -> Plan:
    """The events recording one operation, stamped at the span's start and end.

    Args:
        found: What the conventions found of the operation.
        lab: Its labels.
        execution: The execution it is recorded as.
        name: The span's name (for a chain or node without another name).
        start: When the span started.
        end: When it ended.
    """
    kind = execution.kind
    start_data: dict[str, Any]
    end_data: dict[str, Any]
    if kind in (MODEL, EMBEDDING):
        return _model_plan(found, lab, execution, start, end)
    if kind in (TOOL, RETRIEVAL):
        tool = lab.tool or found.name or name
        start_data = {"tool": tool, "args": _value(found.input)}
        tool_type = "datastore" if kind == RETRIEVAL else lab.tool_type
        for key, value in (
            ("tool_type", tool_type),
            ("description", lab.tool_description),
            ("tool_call_id", lab.tool_call_id),
        ):
            if value is not None:
                start_data[key] = value
        end_data = {"tool": tool, "result": _value(found.output), "is_error": lab.error is not None}
        start_type, end_type = ev.TOOL_EXEC_START, ev.TOOL_EXEC_END
    else:
        agent = (lab.agent if kind == AGENT else None) or found.name or name
        start_data = {"agent": agent}
        end_data = {"agent": agent}
        for data, messages, value in (
            (start_data, found.inputs, found.input),
            (end_data, found.outputs, found.output),
        ):
            if messages:
                data["messages"] = messages
            if value is not ABSENT:
                data["input" if data is start_data else "output"] = value
        if found.system:
            start_data["system"] = found.system
        if found.tools:
            start_data["tools"] = found.tools
        start_type, end_type = ev.AGENT_START, ev.AGENT_END
    if lab.error is not None:
        end_data["error"] = lab.error
    if found.problems:
        start_data["problems"] = list(found.problems)
    return Plan(
        [Event(start_type, execution, _extras(start_data, found.kept_in), start)],
        [Event(end_type, execution, _extras(end_data, found.kept_out), end)],
    )


def _model_plan(
    found: Found, lab: Labels, execution: Execution, start: datetime, end: datetime
) -> Plan:
    messages: list[Message] = list(found.inputs or ())
    texts = found.input
    if not messages and isinstance(texts, list) and all(isinstance(t, str) for t in texts):
        messages, texts = [UserMessage(t) for t in texts], ABSENT  # the texts embedded
    request: dict[str, Any] = {
        "messages": messages,
        "tools": list(found.tools or ()),
        "config": dict(lab.config),
    }
    for key, value in (
        ("model", lab.model),
        ("provider", lab.provider),
        ("stream", lab.stream),
        ("server_address", lab.server_address),
        ("server_port", lab.server_port),
    ):
        if value is not None:
            request[key] = value
    if found.system:
        request["system"] = found.system
    if texts is not ABSENT:
        request["input"] = texts
    if found.problems:
        request["problems"] = list(found.problems)
    reply: dict[str, Any] = {}
    outputs = [_reply(m, lab) for m in found.outputs or ()]
    if outputs:
        reply["partial_message" if lab.error is not None else "message"] = outputs[0]
        if len(outputs) > 1:
            reply["messages"] = outputs[1:]
    elif lab.usage is not None:
        reply["usage"] = lab.usage
    if lab.error is not None:
        reply["error"] = lab.error
    for key, value in (
        ("model", lab.response_model),
        ("stop_reason", lab.stop_reason),
        ("response_id", lab.response_id),
    ):
        if value is not None:
            reply[key] = value
    if found.output is not ABSENT:
        reply["output"] = found.output
    refs = {INPUT_MESSAGES_REF: 0}
    if found.system or any(isinstance(m, SystemMessage) for m in messages):
        refs[SYSTEM_INSTRUCTIONS_REF] = 0
    if found.tools:
        refs[TOOL_DEFINITIONS_REF] = 0
    if outputs:
        refs[OUTPUT_MESSAGES_REF] = 1
    return Plan(
        [Event(ev.MODEL_REQUEST, execution, _extras(request, found.kept_in), start)],
        [Event(ev.MODEL_EXEC_END, execution, _extras(reply, found.kept_out), end)],
        refs,
    )


def _reply(message: Message, lab: Labels) -> Message:
    """An output message with the call's response labels, as loopscribe's replies carry them."""
    if not isinstance(message, AssistantMessage):
        return message
    return dataclasses.replace(
        message,
        model=message.model or lab.response_model or lab.model,
        provider=message.provider or lab.provider,
        usage=message.usage or lab.usage,
        stop_reason=message.stop_reason or lab.stop_reason,
        response_id=message.response_id or lab.response_id,
    )


def references(
    plan_: Plan,
    seqs: Sequence[int],
    *,
    session_id: str,
    run_id: str,
    attempt: int,
    file_uri: str,
) -> dict[str, str | int]:
    """The attributes that name an execution's written records (``seqs``, in plan order)."""
    refs: dict[str, str | int] = {}
    for key, index in plan_.refs.items():
        if index < len(seqs):
            refs[key] = f"{file_uri}#seq={seqs[index]}"
    refs[LS_SESSION_ID] = session_id
    refs[LS_RUN_ID] = run_id
    if attempt != 1:
        refs[LS_ATTEMPT] = attempt
    if seqs:
        refs[LS_SEQ_FIRST] = seqs[0]
        refs[LS_SEQ_LAST] = seqs[-1]
    if not plan_.refs:
        refs[LS_FILE] = file_uri  # the gen_ai references name it already
    return refs

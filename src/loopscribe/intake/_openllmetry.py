"""OpenLLMetry's (Traceloop's) attributes, as its instrumentations set them.

Its releases before the OpenTelemetry GenAI conventions' message attributes
(and its instrumentations run with ``use_legacy_attributes``) flatten each
message into indexed attributes; its SDK's workflows and tasks keep their
inputs and outputs as JSON text:

==============================================  ==================================
attribute                                       becomes
==============================================  ==================================
``gen_ai.prompt.{i}.role`` / ``.content``       input messages (content: text, or
``.tool_call_id``,                              JSON text of a part list)
``.tool_calls.{j}.{id,name,arguments}``
``gen_ai.completion.{i}.role`` / ``.content``   output messages, ``finish_reason``
``.finish_reason``, ``.refusal``,
``.tool_calls.{j}.*``, ``.function_call.*``
``gen_ai.completion.{i}.content_filter_results``  kept
``llm.request.functions.{i}.{name,              tool definitions
description,parameters}``
``traceloop.entity.input`` / ``.output``        the operation's input / output
==============================================  ==================================

``llm.request.type`` (``chat``, ``completion``, ``embedding``, ``rerank``)
and ``traceloop.span.kind`` (``workflow``, ``task``, ``agent``, ``tool``)
say which operation a span is. The current releases emit the GenAI
conventions' ``gen_ai.input.messages`` instead, which ``_otel_genai`` reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._messages import AssistantMessage
from ._found import (
    AGENT,
    EMBEDDING,
    MODEL,
    OTHER,
    RETRIEVAL,
    TOOL,
    Found,
    Message,
    json_or_text,
    maybe_json,
    openai_messages,
    plain,
    split_indexed,
    text,
    tool_definitions,
    unflatten,
)

PROMPTS: Final = "gen_ai.prompt."
COMPLETIONS: Final = "gen_ai.completion."
FUNCTIONS: Final = "llm.request.functions."
ENTITY_INPUT: Final = "traceloop.entity.input"
ENTITY_OUTPUT: Final = "traceloop.entity.output"
SPAN_KINDS: Final = {"workflow": OTHER, "task": OTHER, "agent": AGENT, "tool": TOOL}
REQUEST_TYPES: Final = {
    "chat": MODEL,
    "completion": MODEL,
    "embedding": EMBEDDING,
    "rerank": RETRIEVAL,
}

CONTENT_KEYS: Final = frozenset(
    {
        ENTITY_INPUT,
        ENTITY_OUTPUT,
        "gen_ai.prompt.0.role",
        "gen_ai.prompt.0.content",
        "gen_ai.completion.0.role",
        "gen_ai.completion.0.content",
        "gen_ai.completion.0.tool_calls.0.name",
        "llm.request.functions.0.name",
    }
)
"""Attributes whose presence says a span carries a body in this convention."""


def read(attributes: Mapping[str, Any], events: Sequence[Any], found: Found) -> None:
    """Add what a span carries in this convention to ``found``."""
    prompts: list[tuple[str, Any]] = []
    completions: list[tuple[str, Any]] = []
    functions: list[tuple[str, Any]] = []
    for key, value in attributes.items():
        if key.startswith(PROMPTS):
            target = prompts
            prefix = PROMPTS
        elif key.startswith(COMPLETIONS):
            target, prefix = completions, COMPLETIONS
        elif key.startswith(FUNCTIONS):
            target, prefix = functions, FUNCTIONS
        elif key == ENTITY_INPUT:
            found.keys.add(key)
            found.input = json_or_text(value)
            continue
        elif key == ENTITY_OUTPUT:
            found.keys.add(key)
            found.output = json_or_text(value)
            continue
        else:
            continue
        indexed = split_indexed(key, prefix)
        if indexed is None:
            continue  # gen_ai.prompt.name, gen_ai.prompt.variable.*: not indexed messages
        found.keys.add(key)
        target.append((key[len(prefix) :], value))
    if prompts:
        items = _items(unflatten(prompts))
        found.inputs = (found.inputs or []) + openai_messages(items, "in", found)
    if completions:
        found.outputs = (found.outputs or []) + _completions(_items(unflatten(completions)), found)
    if functions:
        found.tools = tool_definitions([_function(item) for item in _items(unflatten(functions))])
    if found.kind is None:
        kind = attributes.get("traceloop.span.kind")
        request = attributes.get("llm.request.type")
        if isinstance(request, str) and request.lower() in REQUEST_TYPES:
            found.kind = REQUEST_TYPES[request.lower()]
        elif isinstance(kind, str):
            found.kind = SPAN_KINDS.get(kind.lower(), OTHER)
    if found.name is None:
        found.name = text(attributes.get("traceloop.entity.name"))


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _completions(items: list[Any], found: Found) -> list[Message]:
    out: list[Message] = []
    for item in items:
        if not isinstance(item, Mapping):
            out.extend(openai_messages([item], "out", found))
            continue
        fields = dict(item)
        filters = fields.pop("content_filter_results", None)
        if filters is not None:
            found.keep(
                f"{COMPLETIONS}{len(out)}.content_filter_results", maybe_json(filters), out=True
            )
        reason = text(fields.pop("finish_reason", None))
        for message in openai_messages([fields], "out", found):
            if isinstance(message, AssistantMessage) and reason is not None:
                out.append(dataclasses.replace(message, stop_reason=reason))
            else:
                out.append(message)
    return out


def _function(item: Any) -> Any:
    if not isinstance(item, Mapping):
        return plain(item)
    out = {k: plain(v) for k, v in item.items()}
    if isinstance(out.get("parameters"), str):
        out["parameters"] = maybe_json(out["parameters"])
    return out

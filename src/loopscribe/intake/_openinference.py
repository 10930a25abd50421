"""OpenInference's attributes, as its instrumentations (OpenAI, LangChain, ...) set them.

==================================================  ================================
attribute                                           becomes
==================================================  ================================
``llm.input_messages.{i}.message.*``                input messages
``llm.output_messages.{i}.message.*``               output messages
  ``.role``, ``.content``, ``.contents.{j}.message_content.{type,text,image.image.url}``,
  ``.tool_calls.{j}.tool_call.{id,function.name,function.arguments}``,
  ``.tool_call_id``, ``.name``, ``.function_call_name``, ``.function_call_arguments_json``
``llm.tools.{i}.tool.json_schema``                  tool definitions
``llm.prompts`` / ``llm.prompts.{i}.prompt.text``   input messages (completion prompts)
``llm.choices.{i}.completion.text``                 output messages
``input.value`` / ``output.value`` (and mime type)  the operation's input / output
``tool.parameters``                                 kept (the tool's declared schema)
``llm.prompt_template.template`` / ``.variables``   kept
``llm.function_call``                               kept
``retrieval.documents.{i}.document.*``              a retrieval's output
``reranker.query``, ``reranker.input_documents.*``  a reranker's input
``reranker.output_documents.*``                     a reranker's output
``embedding.embeddings.{i}.embedding.text``         the texts embedded (input)
``embedding.embeddings.{i}.embedding.vector``       the vectors (output)
``input.images``, ``output.images``,                kept
``input.documents``, ``output.documents``
==================================================  ================================

``openinference.span.kind`` says which operation a span is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._messages import AssistantMessage, TextContent, UserMessage
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
    json_value,
    maybe_json,
    openai_messages,
    plain,
    tool_definitions,
    unflatten,
)

KIND: Final = "openinference.span.kind"
INPUT_VALUE: Final = "input.value"
OUTPUT_VALUE: Final = "output.value"
SPAN_KINDS: Final = {
    "LLM": MODEL,
    "EMBEDDING": EMBEDDING,
    "TOOL": TOOL,
    "RETRIEVER": RETRIEVAL,
    "RERANKER": RETRIEVAL,
    "AGENT": AGENT,
    "CHAIN": OTHER,
    "GUARDRAIL": OTHER,
    "EVALUATOR": OTHER,
    "PROMPT": OTHER,
    "UNKNOWN": OTHER,
}

# Whole-value attributes that carry a body: where each goes.
_EXACT: Final = {
    INPUT_VALUE: "input",
    OUTPUT_VALUE: "output",
    "tool.parameters": "kept_in",
    "llm.prompt_template.template": "kept_in",
    "llm.prompt_template.variables": "kept_in",
    "llm.function_call": "kept_out",
    "llm.prompts": "prompts",
    "reranker.query": "query",
}
# Indexed attributes (prefix + "{i}." + field) that carry a body.
_GROUPS: Final = (
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.tools.",
    "llm.prompts.",
    "llm.choices.",
    "retrieval.documents.",
    "reranker.input_documents.",
    "reranker.output_documents.",
    "embedding.embeddings.",
    "input.images",
    "output.images",
    "input.documents",
    "output.documents",
)
_FIRST_SEGMENTS: Final = frozenset(p.split(".", 1)[0] for p in (*_EXACT, *_GROUPS))

CONTENT_KEYS: Final = frozenset(
    {
        *_EXACT,
        "llm.input_messages.0.message.role",
        "llm.input_messages.0.message.content",
        "llm.output_messages.0.message.role",
        "llm.output_messages.0.message.content",
        "llm.tools.0.tool.json_schema",
        "llm.prompts.0.prompt.text",
        "llm.choices.0.completion.text",
        "retrieval.documents.0.document.content",
        "retrieval.documents.0.document.id",
        "reranker.input_documents.0.document.content",
        "reranker.output_documents.0.document.content",
        "embedding.embeddings.0.embedding.text",
        "embedding.embeddings.0.embedding.vector",
    }
)
"""Attributes whose presence says a span carries a body in this convention."""


def read(attributes: Mapping[str, Any], events: Sequence[Any], found: Found) -> None:
    """Add what a span carries in this convention to ``found``."""
    groups: dict[str, list[tuple[str, Any]]] = {}
    for key, value in attributes.items():
        if key.partition(".")[0] not in _FIRST_SEGMENTS:
            continue
        target = _EXACT.get(key)
        if target is not None:
            found.keys.add(key)
            _exact(key, target, value, attributes, found)
            continue
        for prefix in _GROUPS:
            if key.startswith(prefix):
                found.keys.add(key)
                groups.setdefault(prefix, []).append((key[len(prefix) :].lstrip("."), value))
                break
    raw_input, raw_output = found.input, found.output
    found.input = found.output = ABSENT
    for prefix, items in groups.items():
        _group(prefix, unflatten(items), found)
    # input.value / output.value are the operation's input and output, unless the
    # span says more precisely (texts embedded, documents): then they are kept.
    for raw, key, out in ((raw_input, INPUT_VALUE, False), (raw_output, OUTPUT_VALUE, True)):
        if raw is ABSENT:
            continue
        if (found.output if out else found.input) is ABSENT:
            if out:
                found.output = raw
            else:
                found.input = raw
        else:
            found.keep(key, raw, out=out)
    kind = attributes.get(KIND)
    if found.kind is None and isinstance(kind, str):
        found.kind = SPAN_KINDS.get(kind.upper(), OTHER)
    if found.name is None:
        for key in ("tool.name", "agent.name", "graph.node.name"):
            name = attributes.get(key)
            if isinstance(name, str) and name:
                found.name = name
                break


def _exact(key: str, target: str, value: Any, attributes: Mapping[str, Any], found: Found) -> None:
    if target == "input":
        found.input = maybe_json(value, attributes.get("input.mime_type"))
    elif target == "output":
        found.output = maybe_json(value, attributes.get("output.mime_type"))
    elif target == "prompts":
        prompts = plain(value)
        prompts = prompts if isinstance(prompts, list) else [prompts]
        found.inputs = (found.inputs or []) + [UserMessage(str(p)) for p in prompts]
    elif target == "query":
        found.input = plain(value)
    else:
        found.keep(key, maybe_json(value), out=target == "kept_out")


def _group(prefix: str, value: Any, found: Found) -> None:
    items = value if isinstance(value, list) else [value]
    if prefix in ("llm.input_messages.", "llm.output_messages."):
        where = "in" if prefix == "llm.input_messages." else "out"
        messages = openai_messages([_message(item) for item in items], where, found)
        if where == "in":
            found.inputs = (found.inputs or []) + messages
        else:
            found.outputs = (found.outputs or []) + messages
    elif prefix == "llm.tools.":
        schemas = [_tool(item, found) for item in items]
        found.tools = tool_definitions(schemas)
    elif prefix == "llm.prompts.":
        texts = [_field(item, "prompt", "text") for item in items]
        found.inputs = (found.inputs or []) + [UserMessage(str(t)) for t in texts if t is not None]
    elif prefix == "llm.choices.":
        texts = [_field(item, "completion", "text") for item in items]
        replies: list[Message] = [
            AssistantMessage((TextContent(str(t)),)) for t in texts if t is not None
        ]
        found.outputs = (found.outputs or []) + replies
    elif prefix == "embedding.embeddings.":
        texts = [_field(item, "embedding", "text") for item in items]
        vectors = [_field(item, "embedding", "vector") for item in items]
        if any(t is not None for t in texts):
            found.input = [plain(t) for t in texts]
        if any(v is not None for v in vectors):
            found.output = [plain(v) for v in vectors]
    elif prefix in ("retrieval.documents.", "reranker.output_documents."):
        found.output = [_document(item) for item in items]
    elif prefix == "reranker.input_documents.":
        found.keep(prefix.rstrip("."), [_document(item) for item in items], out=False)
    else:
        found.keep(prefix.rstrip("."), plain(value), out=prefix.startswith("output"))


def _field(item: Any, outer: str, inner: str) -> Any:
    node = item.get(outer) if isinstance(item, Mapping) else None
    return node.get(inner) if isinstance(node, Mapping) else None


def _document(item: Any) -> Any:
    document = item.get("document") if isinstance(item, Mapping) else None
    if not isinstance(document, Mapping):
        return plain(item)
    out = {k: plain(v) for k, v in document.items()}
    if isinstance(out.get("metadata"), str):
        out["metadata"] = maybe_json(out["metadata"])
    return out


def _tool(item: Any, found: Found) -> Any:
    tool = item.get("tool") if isinstance(item, Mapping) else None
    if not isinstance(tool, Mapping):
        return plain(item)
    schema = tool.get("json_schema")
    if schema is not None:
        return json_value(schema, "llm.tools.tool.json_schema", found)
    return {k: maybe_json(v) for k, v in tool.items()}


def _message(item: Any) -> Any:
    """An OpenInference message (``{"message": {...}}``) in the OpenAI chat shape."""
    message = item.get("message") if isinstance(item, Mapping) else None
    if not isinstance(message, Mapping):
        return plain(item)
    out: dict[str, Any] = {}
    for key in ("role", "name", "tool_call_id"):
        if message.get(key) is not None:
            out[key] = message[key]
    contents = message.get("contents")
    if isinstance(contents, list):
        out["content"] = [_part(c) for c in contents]
    elif message.get("content") is not None:
        out["content"] = message["content"]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_call(c) for c in calls]
    if message.get("function_call_name") is not None:
        out["function_call"] = {
            "name": message["function_call_name"],
            "arguments": message.get("function_call_arguments_json"),
        }
    return out


def _part(item: Any) -> Any:
    part = item.get("message_content") if isinstance(item, Mapping) else None
    if not isinstance(part, Mapping):
        return plain(item)
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part.get("text")}
    image = part.get("image")
    if kind == "image" and isinstance(image, Mapping):
        url = _field(image, "image", "url") or image.get("url")
        if isinstance(url, str):
            return {"type": "image_url", "image_url": {"url": url}}
    return plain(part)


def _call(item: Any) -> Any:
    call = item.get("tool_call") if isinstance(item, Mapping) else None
    if not isinstance(call, Mapping):
        return plain(item)
    inner = call.get("function")
    function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else {}
    return {
        "id": call.get("id"),
        "function": {"name": function.get("name"), "arguments": function.get("arguments")},
    }

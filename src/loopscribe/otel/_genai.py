"""Recorded messages in the GenAI semantic conventions' message JSON schema.

A chat span's ``gen_ai.input.messages_ref`` / ``gen_ai.output.messages_ref``
(and ``gen_ai.system_instructions_ref`` / ``gen_ai.tool.definitions_ref``)
name a record: ``file:///.../s.jsonl#seq=12``. :func:`resolve_reference`
follows such a reference and returns what the conventions' opt-in
attributes would have held, in their JSON schema: input messages as
``[{"role": ..., "parts": [...]}]``, output messages with
``finish_reason``, system instructions and tool definitions as part and
definition lists. ``loopscribe find --genai-json`` and the viewer's record
API (``?format=genai``) return the same.

Messages are read in every shape a session file holds them: loopscribe's
typed messages (``{"$ls": "assistant", ...}``) and plain dicts in the
OpenAI, Anthropic or Gemini shapes.

A model request recorded without messages (an imported transcript holds
only the conversation) resolves to the committed messages (``message_end``)
that formed the call's context: those of its own conversation (a nested
agent, such as a Claude Code subagent, has its own: its prompt and its
turns) since that conversation's last compaction (its summary first), up to
the request.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import orjson

from .. import events as ev
from .._errors import LoopscribeError
from .._reader import read
from .._scope import AgentScopes
from .._source import file_url_path

TAG: Final = "$ls"

INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"

_FINISH_REASONS: Final = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "complete": "stop",
    "finish": "stop",
    "length": "length",
    "max_tokens": "length",
    "model_length": "length",
    "tool_use": "tool_call",
    "tool_calls": "tool_call",
    "tool_call": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "safety": "content_filter",
    "error": "error",
}
_SYSTEM_KEYS: Final = ("system", "instructions", "system_instructions")
_ROLES: Final = {"human": "user", "ai": "assistant", "model": "assistant", "function": "tool"}


class MessageReferenceError(LoopscribeError, ValueError):
    """A reference that names no record, or a record that holds no messages."""


def parse_reference(ref: str) -> tuple[Path, int]:
    """The file and seq a ``file:///...#seq=N`` reference (or ``PATH#seq=N``) names.

    Raises:
        MessageReferenceError: ``ref`` has no ``#seq=N`` or is not a local file.
    """
    base, sep, fragment = ref.partition("#")
    params = urllib.parse.parse_qs(fragment)
    seqs = params.get("seq", [])
    if not sep or len(seqs) != 1 or not seqs[0].isdigit():
        raise MessageReferenceError(
            f"{ref!r} is not a loopscribe record reference; expected "
            "'file:///path/to/session.jsonl#seq=N' (a gen_ai.*_ref attribute's value)"
        )
    parts = urllib.parse.urlsplit(base)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise MessageReferenceError(
                f"{ref!r} names a file on host {parts.netloc!r}, not this one"
            )
        path = file_url_path(parts.path)
    elif parts.scheme and len(parts.scheme) > 1:
        raise MessageReferenceError(
            f"{ref!r} is a {parts.scheme}: URI; fetch the session file and pass its local path"
        )
    else:
        path = Path(base)
    return path, int(seqs[0])


def resolve_reference(ref: str | os.PathLike[str], seq: int | None = None) -> dict[str, Any]:
    """The GenAI-convention content of the record a span reference names.

    Args:
        ref: A ``gen_ai.*_ref`` value (``file:///...#seq=N``), or a session
            file path together with ``seq``.
        seq: The record's sequence number, when ``ref`` is a plain path.

    Returns:
        For a ``model_request``: ``gen_ai.input.messages``, plus
        ``gen_ai.system_instructions`` and ``gen_ai.tool.definitions`` when
        the request has them. For a ``model_exec_end``:
        ``gen_ai.output.messages``. For a ``message_end``: the committed
        message as ``gen_ai.input.messages``. Each value has the schema of
        the conventions' attribute of that name. ``seq``, ``type`` and the
        record's ``execution`` are included.

    Raises:
        MessageReferenceError: The reference is malformed, or its record is of
            another type or missing.
        OSError: The file cannot be read.
        FormatError: The file is damaged.
    """
    if seq is None:
        path, seq = parse_reference(os.fspath(ref))
    else:
        path = Path(ref)
    # Per conversation scope (the top level, or a nested agent's own context).
    scopes = AgentScopes()
    summary: dict[str | None, Any] = {}
    committed: dict[str | None, list[Any]] = {}
    for record in read(path, decode=False):
        scope = scopes.scope(record.execution)
        if record.seq == seq:
            return _content(
                record.type,
                record.data,
                record.seq,
                record.execution,
                summary.get(scope),
                committed.get(scope, []),
            )
        if record.type == ev.COMPACTION:
            summary[scope], committed[scope] = record.data.get("summary"), []
        elif record.type == ev.MESSAGE_END:
            committed.setdefault(scope, []).append(record.data.get("message"))
    raise MessageReferenceError(f"{path}: no record with seq {seq}")


def _content(
    kind: str,
    data: Mapping[str, Any],
    seq: int,
    execution: Any,
    summary: Any,
    committed: list[Any],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq": seq,
        "type": kind,
        "execution": None if execution is None else execution.to_json(),
    }
    if kind == ev.MODEL_REQUEST:
        messages = data.get("messages")
        if not isinstance(messages, list | tuple) or not messages:
            # An imported request: the context is the conversation so far.
            messages = ([_summary_message(summary)] if summary is not None else []) + committed
        out[INPUT_MESSAGES] = input_messages(messages)
        system = system_instructions(data)
        if system:
            out[SYSTEM_INSTRUCTIONS] = system
        tools = tool_definitions(data.get("tools"))
        if tools:
            out[TOOL_DEFINITIONS] = tools
        return out
    if kind == ev.MODEL_EXEC_END:
        message = data.get("message") or data.get("partial_message")
        if message is None:
            raise MessageReferenceError(f"seq {seq} ({kind}) holds no response message")
        out[OUTPUT_MESSAGES] = [output_message(message, data.get("stop_reason"))]
        return out
    if kind == ev.MESSAGE_END:
        out[INPUT_MESSAGES] = input_messages([data.get("message")])
        return out
    raise MessageReferenceError(
        f"seq {seq} is a {kind} record; references name model_request, model_exec_end "
        "or message_end records"
    )


def _summary_message(summary: Any) -> Any:
    return {"role": "system", "content": summary} if isinstance(summary, str) else summary


# -- messages -----------------------------------------------------------------------


def _get(obj: Any, *names: str) -> Any:
    if not isinstance(obj, Mapping):
        return None
    for name in names:
        value = obj.get(name)
        if value is not None:
            return value
    return None


def _role(message: Mapping[str, Any]) -> str:
    tag = message.get(TAG)
    if tag == "tool_result":
        return "tool"
    role = message.get("role") or tag or "user"
    role = str(role)
    return _ROLES.get(role, role)


def input_messages(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """Messages as the conventions' ``gen_ai.input.messages``: ``[{role, parts}]``."""
    out = []
    for message in messages:
        converted = chat_message(message)
        if converted is not None:
            out.append(converted)
    return out


def chat_message(message: Any) -> dict[str, Any] | None:
    """One message as a ``ChatMessage``; ``None`` for something that is not a message."""
    if isinstance(message, str):
        return {"role": "user", "parts": [{"type": "text", "content": message}]}
    if not isinstance(message, Mapping):
        return None
    role = _role(message)
    parts: list[dict[str, Any]] = []
    if role == "tool" and (message.get(TAG) == "tool_result" or "tool_call_id" in message):
        parts.append(
            {
                "type": "tool_call_response",
                "id": _get(message, "tool_call_id", "tool_use_id"),
                "response": _response_value(message.get("content")),
            }
        )
    else:
        parts.extend(_parts(message.get("content")))
        parts.extend(_parts(message.get("parts")))
        for call in message.get("tool_calls") or ():
            part = _tool_call(call)
            if part is not None:
                parts.append(part)
    out: dict[str, Any] = {"role": role, "parts": parts}
    name = message.get("name")
    if isinstance(name, str) and name and role != "tool":
        out["name"] = name
    return out


def output_message(message: Any, stop_reason: Any = None) -> dict[str, Any]:
    """A response as an ``OutputMessage``: role, parts and ``finish_reason``."""
    converted = chat_message(message) or {"role": "assistant", "parts": []}
    reason = stop_reason
    if reason is None and isinstance(message, Mapping):
        reason = _get(message, "stop_reason", "finish_reason")
    converted["role"] = "assistant" if converted["role"] in ("user", "model") else converted["role"]
    converted["finish_reason"] = finish_reason(reason)
    return converted


def finish_reason(reason: Any) -> str:
    """A provider's stop reason as the conventions' ``FinishReason``."""
    if not isinstance(reason, str) or not reason:
        return "stop"
    return _FINISH_REASONS.get(reason.lower(), reason)


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, list | tuple):
        return [{"type": "text", "content": orjson.dumps(content, default=str).decode()}]
    parts = []
    for item in content:
        part = _part(item)
        if part is not None:
            parts.append(part)
    return parts


def _part(item: Any) -> dict[str, Any] | None:
    if isinstance(item, str):
        return {"type": "text", "content": item}
    if not isinstance(item, Mapping):
        return None
    kind = item.get(TAG) or item.get("type")
    if kind in ("text", "input_text", "output_text") or (kind is None and "text" in item):
        return {"type": "text", "content": item.get("text", "")}
    if kind in ("thinking", "reasoning", "redacted_thinking"):
        return {"type": "reasoning", "content": _get(item, "thinking", "text", "content") or ""}
    if kind in ("tool_call", "tool_use", "function_call") or (
        kind is None and "function_call" in item
    ):
        return _tool_call(item.get("function_call") or item)
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": _get(item, "tool_use_id", "tool_call_id", "id"),
            "response": _response_value(item.get("content")),
        }
    if kind == "image" and isinstance(item.get("data"), str):
        return _drop_none(
            {
                "type": "blob",
                "modality": "image",
                "mime_type": item.get("mime_type"),
                "content": item["data"],
            }
        )
    if kind in ("file", "image", "image_url", "document", "audio", "video"):
        return _media(item, kind)
    if kind is None and "inline_data" in item:
        blob = item["inline_data"]
        return _drop_none(
            {
                "type": "blob",
                "modality": _modality(_get(blob, "mime_type")),
                "mime_type": _get(blob, "mime_type"),
                "content": _get(blob, "data") or "",
            }
        )
    generic = {k: v for k, v in item.items() if k != TAG}
    generic["type"] = str(kind) if kind else "unknown"
    return generic


def _media(item: Mapping[str, Any], kind: str) -> dict[str, Any]:
    mime = item.get("mime_type") or item.get("media_type")
    modality = item.get("modality") or (kind if kind in ("image", "audio", "video") else None)
    modality = modality or _modality(mime)
    source = item.get("source") if isinstance(item.get("source"), Mapping) else {}
    image_url = item.get("image_url")
    uri = (
        item.get("uri")
        or item.get("url")
        or (image_url.get("url") if isinstance(image_url, Mapping) else image_url)
        or _get(source, "url")
    )
    file_id = item.get("file_id") or _get(source, "file_id")
    if isinstance(uri, str) and uri:
        return _drop_none({"type": "uri", "modality": modality, "mime_type": mime, "uri": uri})
    if isinstance(file_id, str) and file_id:
        return _drop_none(
            {"type": "file", "modality": modality, "mime_type": mime, "file_id": file_id}
        )
    data = _get(source, "data") or item.get("data")
    return _drop_none(
        {
            "type": "blob",
            "modality": modality,
            "mime_type": mime or _get(source, "media_type"),
            "content": data if isinstance(data, str) else "",
        }
    )


def _modality(mime: Any) -> str:
    if isinstance(mime, str):
        for modality in ("image", "audio", "video"):
            if mime.startswith(modality + "/"):
                return modality
    return "document"


def _tool_call(call: Any) -> dict[str, Any] | None:
    if not isinstance(call, Mapping):
        return None
    function = call.get("function") if isinstance(call.get("function"), Mapping) else call
    name = _get(function, "name")
    if not isinstance(name, str):
        return None
    arguments = _get(function, "arguments", "input", "args")
    if isinstance(arguments, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            arguments = orjson.loads(arguments)
    return _drop_none(
        {
            "type": "tool_call",
            "id": _get(call, "id", "call_id", "tool_call_id"),
            "name": name,
            "arguments": arguments,
        }
    )


def _response_value(content: Any) -> Any:
    """A tool result's content: its text when it is all text, else the parts."""
    if isinstance(content, str) or content is None:
        return content
    parts = _parts(content)
    if parts and all(part["type"] == "text" for part in parts):
        return "".join(str(part["content"]) for part in parts)
    return parts


def _drop_none(part: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if v is not None}


# -- system instructions and tools -----------------------------------------------------


def system_instructions(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A request's system instructions as the conventions' part list.

    From ``system`` / ``instructions`` in the request when it has them
    apart, else from its system (or developer) messages.
    """
    for key in _SYSTEM_KEYS:
        value = data.get(key)
        if value:
            return _parts(value)
    parts: list[dict[str, Any]] = []
    messages = data.get("messages")
    if isinstance(messages, list | tuple):
        for message in messages:
            if isinstance(message, Mapping) and _role(message) in ("system", "developer"):
                parts.extend(_parts(message.get("content")))
    return parts


def tool_definitions(tools: Any) -> list[dict[str, Any]]:
    """A request's tools as the conventions' tool definitions (``type``, ``name``, ...)."""
    if isinstance(tools, Mapping):
        tools = list(tools.values())
    if not isinstance(tools, list | tuple):
        return []
    out = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        name = _get(function, "name")
        if not isinstance(name, str):
            continue
        definition: dict[str, Any] = {"type": str(tool.get("type") or "function"), "name": name}
        description = _get(function, "description")
        if isinstance(description, str):
            definition["description"] = description
        parameters = _get(function, "parameters", "input_schema", "parameters_json_schema")
        if parameters is not None:
            definition["parameters"] = parameters
        out.append(definition)
    return out

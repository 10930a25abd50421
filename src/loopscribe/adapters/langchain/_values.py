"""What LangChain's values become in records: JSON-safe copies, usage, configs, documents,
retry tags, interrupts and the run context. Pure functions; no handler state."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ParamSpec
from uuid import UUID

import orjson
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables.config import var_child_runnable_config
from pydantic import BaseModel

from ..._freeze import snapshot_error
from ..._messages import (
    FileContent,
    Message,
    TextContent,
    Usage,
)
from ._messages import from_langchain, provider_name, usage_of

if TYPE_CHECKING:
    from tenacity import RetryCallState


_RETRY_TAG = "retry:attempt:"
_MAX_DEPTH = 64
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
# Invocation parameters under the names the record contract uses.
_CONFIG_NAMES = {
    "max_output_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "max_tokens_to_sample": "max_tokens",
    "num_predict": "max_tokens",
    "stop_sequences": "stop",
}

P = ParamSpec("P")


def _unencodable(value: Any) -> dict[str, str]:
    return snapshot_error(value, TypeError("no JSON form"))


def _never(_: Any) -> bool:
    return False


def _jsonable(value: Any, codec_ok: Callable[[Any], bool], depth: int = 0) -> Any:
    """``value`` as plain JSON; messages lowered, unknown values diagnosed."""
    if value is None or isinstance(value, str | bool | float):
        return value
    if isinstance(value, int):
        # orjson holds 64-bit integers only; a bigger one would fail the write.
        return value if _INT64_MIN <= value <= _UINT64_MAX else str(value)
    if depth > _MAX_DEPTH:
        return snapshot_error(value, RecursionError("nested too deeply"))
    if isinstance(value, BaseMessage):
        return from_langchain(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, codec_ok, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, codec_ok, depth + 1) for v in value]
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, codec_ok, depth + 1)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, UUID | Decimal | PurePath):
        return str(value)
    if codec_ok(value):
        # A type the Session's codec knows: keep it typed.
        return value
    if isinstance(value, BaseModel):
        return _jsonable(dict(value), codec_ok, depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _jsonable(fields, codec_ok, depth + 1)
    return _unencodable(value)


def _content_key(message: BaseMessage) -> str:
    """What a message says, without its id: the same words said again match."""
    raw: Any = [message.type, message.content, getattr(message, "tool_calls", None)]
    try:
        data = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS, default=str)
    except (TypeError, orjson.JSONEncodeError):
        data = repr(raw).encode()
    return hashlib.sha256(data).hexdigest()


def _usage(message: Any, llm_output: Mapping[str, Any] | None) -> Usage | None:
    """Token usage from ``AIMessage.usage_metadata``, else the provider's ``token_usage``."""
    usage = usage_of(getattr(message, "usage_metadata", None))
    if usage is not None:
        return usage
    raw = (llm_output or {}).get("token_usage") or (llm_output or {}).get("usage")
    if isinstance(raw, Mapping):
        inp = raw.get("prompt_tokens", raw.get("input_tokens"))
        out = raw.get("completion_tokens", raw.get("output_tokens"))
        details = raw.get("prompt_tokens_details") or {}
        reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if isinstance(inp, int) or isinstance(out, int):
            return Usage(
                input_tokens=int(inp or 0),
                output_tokens=int(out or 0),
                cache_read_tokens=int(details.get("cached_tokens") or 0),
                reasoning_tokens=int(reasoning or 0),
            )
    return None


def _block_texts(blocks: Sequence[str | Mapping[str, Any]]) -> Iterator[str]:
    """The text of streamed content blocks: strings and ``{"type": "text"}`` blocks."""
    for block in blocks:
        if isinstance(block, str):
            yield block
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            yield block["text"]


def _partial(response: LLMResult) -> Message | dict[str, Any] | None:
    """The streamed content of a failed call, if it produced any."""
    for generations in response.generations:
        for generation in generations:
            if not isinstance(generation, ChatGeneration):
                continue
            message = generation.message
            if message.content or getattr(message, "tool_calls", None):
                return from_langchain(message)
    return None


def _provider(metadata: Mapping[str, Any], serialized: Mapping[str, Any] | None) -> str | None:
    """The well-known provider name; ``None`` when LangChain derived it from the class name."""
    ls_provider = _first_str(metadata.get("ls_provider"))
    if ls_provider is None:
        return None
    ids = (serialized or {}).get("id")
    cls = ids[-1] if isinstance(ids, list) and ids and isinstance(ids[-1], str) else ""
    if ls_provider.lower() in {cls.lower(), cls.lower().replace("chat", "")}:
        return None
    return provider_name(ls_provider)


def _state_messages(output: Any, depth: int = 0) -> list[BaseMessage]:
    """The messages a graph node returned: ``{"messages": [...]}``, a ``Command``, or a list."""
    if depth > 4:
        return []
    if isinstance(output, BaseMessage):
        return [output]
    update = getattr(output, "update", None)
    if update is not None and not isinstance(output, Mapping):
        return _state_messages(update, depth + 1)  # a LangGraph Command
    if isinstance(output, Mapping):
        found = output.get("messages")
        if isinstance(found, BaseMessage):
            return [found]
        return [m for m in found if isinstance(m, BaseMessage)] if isinstance(found, list) else []
    if isinstance(output, list | tuple):
        return [m for item in output for m in _state_messages(item, depth + 1)]
    return []


def _config(params: Mapping[str, Any]) -> dict[str, Any]:
    """Invocation parameters, with the well-known ones under the contract's names."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = _CONFIG_NAMES.get(key, key)
        if name not in out or out[name] is None:
            out[name] = value
    return out


def _document(doc: Document) -> dict[str, Any]:
    out: dict[str, Any] = {"page_content": doc.page_content}
    if doc.metadata:
        out["metadata"] = doc.metadata
    if doc.id:
        out["id"] = doc.id
    return out


def _document_ref(doc: Document) -> FileContent | TextContent:
    """A retrieved document as message content: its source by reference, else its text."""
    source = doc.metadata.get("source") if doc.metadata else None
    if isinstance(source, str) and source:
        return FileContent(uri=source, name=doc.id, modality="document")
    return TextContent(doc.page_content)


def _first_str(*values: Any) -> str | None:
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None


def _serialized_name(serialized: Mapping[str, Any] | None) -> str | None:
    if not serialized:
        return None
    ids = serialized.get("id")
    last = ids[-1] if isinstance(ids, list) and ids else None
    return _first_str(serialized.get("name"), last)


def _retry_attempt(tags: Sequence[str] | None) -> int | None:
    """The attempt number ``Runnable.with_retry`` tags a retried child run with."""
    for tag in tags or ():
        if tag.startswith(_RETRY_TAG):
            number = tag[len(_RETRY_TAG) :]
            if number.isdigit() and int(number) > 1:
                return int(number)
    return None


def _control_flow(error: BaseException) -> str | None:
    """How a LangGraph control-flow exception stopped a run; ``None`` for a real failure.

    LangGraph raises ``GraphBubbleUp`` subclasses through the callbacks to
    pause or redirect a graph: ``interrupt()`` (``GraphInterrupt``), a
    ``Command(graph=Command.PARENT)`` (``ParentCommand``), a drain. The run
    stopped as designed; it did not fail.
    """
    names = {cls.__name__ for cls in type(error).__mro__ if cls.__module__.startswith("langgraph")}
    if "GraphBubbleUp" not in names:
        return None
    if "GraphInterrupt" in names:
        return "interrupted"
    if "ParentCommand" in names:
        return "parent_command"
    if "GraphDrained" in names:
        return "drained"
    return "bubbled_up"


def _interrupt_values(items: Any) -> list[dict[str, Any]]:
    """LangGraph ``Interrupt`` objects as ``{"id", "value"}`` (the value the graph asked with)."""
    if not isinstance(items, list | tuple):
        return []
    out = []
    for item in items:
        if hasattr(item, "value"):
            found = {"id": getattr(item, "id", None), "value": item.value}
            out.append({k: v for k, v in found.items() if v is not None})
    return out


def _interrupts(error: BaseException) -> list[dict[str, Any]]:
    """The interrupts a ``GraphInterrupt`` carries."""
    return [found for arg in error.args for found in _interrupt_values(arg)]


def _context_parent() -> UUID | None:
    """The run LangChain's config context says is the parent of a run starting now.

    Some runnables (``RunnableWithFallbacks`` among them) set their child
    callbacks in the config context and then invoke the child with the
    caller's config, so the child reports the caller's parent (or none).
    """
    config = var_child_runnable_config.get()
    callbacks = config.get("callbacks") if config else None
    parent = getattr(callbacks, "parent_run_id", None)
    return parent if isinstance(parent, UUID) else None


def _is_command(value: Any) -> bool:
    """Whether ``value`` is a LangGraph ``Command`` (a resume, an update), without importing it."""
    cls = type(value)
    return cls.__name__ == "Command" and cls.__module__.startswith("langgraph")


def _outcome_error(retry_state: RetryCallState) -> BaseException | None:
    outcome = retry_state.outcome
    if outcome is None or not outcome.failed:
        return None
    return outcome.exception()


# -- handler state ---------------------------------------------------------------

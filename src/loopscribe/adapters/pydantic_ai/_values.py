"""What pydantic-ai's values become in records: requests, responses, tools, configs, errors,
retry causes, deferred calls and provider state, as plain JSON. Pure functions; no run state."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolRequests
from pydantic_ai.capabilities import (
    RawToolArgs,
)
from pydantic_ai.exceptions import (
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    tool_return_ta,
)
from pydantic_ai.models import (
    ModelRequestParameters,
)
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from ..._freeze import snapshot_error
from ..._messages import SystemMessage
from ..._model import Event
from ._messages import from_pydantic_ai
from ._state import _ToolCall


@functools.cache
def _adapters() -> tuple[TypeAdapter[ModelRequestParameters], TypeAdapter[list[ToolDefinition]]]:
    # Built on first use: schema building is not free, and importing the adapter should be.
    return TypeAdapter(ModelRequestParameters), TypeAdapter(list[ToolDefinition])


# Declared in `ModelRequestParameters` and written to `model_request.tools` instead of its config.
_TOOL_FIELDS = frozenset({"function_tools", "output_tools", "native_tools"})

# The exception behind a ToolRetryError, by the cause pydantic-ai records for the retry.
_RETRY_CAUSES = {
    "model_retry": "ModelRetry",
    "validation_error": "ValidationError",
    "unknown_tool": "UnknownTool",
    "unavailable_tool": "UnavailableTool",
}


# -- lowering pydantic-ai objects to plain JSON ----------------------------------------


def _request_messages(messages: Sequence[ModelMessage]) -> list[Any]:
    """What the model is sent, as loopscribe messages: the latest instructions first."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), default=-1)
    out: list[Any] = []
    for i, message in enumerate(messages):
        converted = from_pydantic_ai(message, instructions=i == last)
        if i == last and converted and isinstance(converted[0], SystemMessage):
            # The model reads the instructions before the conversation.
            out.insert(0, converted.pop(0))
        out.extend(converted)
    return out


def _response_message(response: ModelResponse) -> Any:
    converted = from_pydantic_ai(response)
    return converted[0] if len(converted) == 1 else converted


def _lower(value: Any) -> Any:
    """Any tool argument or return value as JSON-compatible data, the way pydantic-ai sends it."""
    try:
        return tool_return_ta.dump_python(value, mode="json")
    except Exception as exc:
        return snapshot_error(value, exc)


def _lower_args(args: RawToolArgs | None) -> Any:
    """The model's arguments: JSON text as the object it encodes, text that is no JSON as is."""
    if isinstance(args, str):
        try:
            return json.loads(args) if args.strip() else {}
        except ValueError:
            return args
    return _lower(args)


def _tools(parameters: ModelRequestParameters) -> list[Any]:
    tools: list[Any] = []
    for definitions in (parameters.function_tools, parameters.output_tools):
        try:
            tools.extend(_adapters()[1].dump_python(list(definitions), mode="json"))
        except Exception as exc:
            tools.append(snapshot_error(definitions, exc))
    for native in parameters.native_tools:
        tools.append(_lower(native))
    return tools


def _config(settings: ModelSettings | None, parameters: ModelRequestParameters) -> dict[str, Any]:
    config: dict[str, Any] = dict(settings or {})
    if "stop_sequences" in config:
        config["stop"] = config.pop("stop_sequences")
    try:
        lowered = _adapters()[0].dump_python(parameters, mode="json")
        config["request_parameters"] = {k: v for k, v in lowered.items() if k not in _TOOL_FIELDS}
    except Exception as exc:
        config["request_parameters"] = snapshot_error(parameters, exc)
    return config


def _with(event: Event, **extra: Any) -> Event:
    """``event`` with more data fields; ``None`` values are left out, as the constructors do."""
    data = dict(event.data)
    data.update({k: v for k, v in extra.items() if v is not None})
    return Event(event.type, event.execution, data, event.timestamp)


def _error_of(exc: BaseException) -> dict[str, Any]:
    """The error as recorded: the exception the tool raised, not pydantic-ai's carrier for it."""
    kind = type(exc).__qualname__
    if isinstance(exc, ToolRetryError):
        retry = exc.tool_retry.retry
        kind = _RETRY_CAUSES.get(retry.cause if retry is not None else "", kind)
    elif isinstance(exc, ToolFailedError):
        kind = "ToolFailed"
    return {"type": kind, "message": str(exc)}


def _deferred(result: AgentRunResult[Any] | None) -> dict[str, str]:
    """The tool calls a run ended waiting for, by ID: ``approval`` or ``external``."""
    output = None if result is None else result.output
    if not isinstance(output, DeferredToolRequests):
        return {}
    waiting = {call.tool_call_id: "external" for call in output.calls}
    waiting.update((call.tool_call_id, "approval") for call in output.approvals)
    return waiting


def _pending_retry(tool: _ToolCall, cause: str) -> dict[str, Any]:
    """The retry pydantic-ai charges for a refused call once this hook returns, as it records it.

    Past the tool's budget the run ends instead, and only the cause is known.
    """
    attempt = tool.retry + 1
    if attempt > tool.max_retries:
        return {"cause": cause, "attempt": None, "max_retries": None}
    return {"cause": cause, "attempt": attempt, "max_retries": tool.max_retries}


class _NotFinished(Exception):
    """Why an attempt that never returned was ended: the run or step moved on without it."""


def _provider_state(response: ModelResponse) -> dict[str, Any] | None:
    """What the provider said about the response beyond the message (ids, details)."""
    state = {
        "provider_name": response.provider_name,
        "provider_response_id": response.provider_response_id,
        "provider_details": _lower(response.provider_details)
        if response.provider_details
        else None,
    }
    return {k: v for k, v in state.items() if v is not None} or None

"""What the Agents SDK's values become in records: JSON-safe copies, declared tools,
provider names, tool results, handoff and guardrail details. Pure functions; no run state."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from agents import (
    Agent,
    Handoff,
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    RunContextWrapper,
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
)
from agents.result import RunResultBase
from agents.tool import FunctionTool, default_tool_error_function
from pydantic import BaseModel

from ..._codec import DEFAULT_CODEC
from ..._messages import TextContent, ToolResultMessage

__all__ = ["GUARDRAIL", "HANDOFF", "provider_of"]

HANDOFF = "handoff"
"""Event type: the agent handed the conversation to another agent."""
GUARDRAIL = "guardrail"
"""Execution kind: an input, output or tool guardrail ran (``guardrail_end`` says if it tripped)."""

_MAX_DEPTH = 32


def _default_tool_error() -> str | None:
    """What the SDK's default failure_error_function tells the model instead of the exception."""
    try:
        return default_tool_error_function(RunContextWrapper(None), Exception())
    except Exception:  # pragma: no cover - a future SDK changed the function
        return None


_DEFAULT_TOOL_ERROR = _default_tool_error()


def _jsonable(value: Any, depth: int = 0, path: frozenset[int] = frozenset()) -> Any:
    """A JSON-compatible copy of an SDK value, so recording never meets an unknown type."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if depth >= _MAX_DEPTH or id(value) in path:
        return str(value)
    inner = path | {id(value)}
    if isinstance(value, BaseModel):
        dumped = value.model_dump(mode="json", exclude_none=True, warnings=False)
        return _jsonable(dumped, depth + 1, inner)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1, inner) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, depth + 1, inner) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _jsonable(getattr(value, f.name, None), depth + 1, inner)
            for f in dataclasses.fields(value)
        }
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _arguments(raw: str) -> Any:
    """Tool-call arguments as parsed JSON, or the raw text when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw


def _new_user_input(items: Sequence[Any]) -> list[Any]:
    """The user messages that end an input: what this ``Runner.run`` call added.

    History in front of them (a ``Session``, or ``result.to_input_list()``)
    was committed by the run that produced it.
    """
    tail: list[Any] = []
    for item in reversed(items):
        if not (isinstance(item, Mapping) and item.get("role") == "user"):
            break
        tail.append(item)
    return [_jsonable(item) for item in reversed(tail)]


def _run_state(result: RunResultBase) -> Any:
    """The SDK's serialized state of an interrupted run (without the tracing API key)."""
    to_state = getattr(result, "to_state", None)
    if not callable(to_state):
        return None
    return to_state().to_json()


def _tool_result(call_id: str, name: str, body: Any, is_error: bool) -> ToolResultMessage:
    """What a function tool gave back to the model, as the model reads it (text)."""
    if isinstance(body, str):
        text = body
    else:
        try:
            text = orjson.dumps(body, default=str).decode()
        except TypeError:
            # No JSON form (an int beyond 64 bits, deep nesting, a lone surrogate): the
            # codec's own diagnosis, as for any recorded value.
            text = DEFAULT_CODEC.dumps(body).decode()
    return ToolResultMessage(call_id, name, (TextContent(text),), is_error=is_error)


# Model-name prefixes (LiteLLM's and the SDK's MultiProvider's) naming a provider.
_PREFIXES = {
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "azure": "azure.ai.openai",
    "groq": "groq",
    "mistral": "mistral_ai",
    "cohere": "cohere",
    "deepseek": "deepseek",
    "xai": "x_ai",
    "openai": "openai",
}


def provider_of(model: Any) -> str:
    """The well-known provider a model talks to: ``openai`` unless the model says otherwise.

    A LiteLLM or prefixed model name (``litellm/anthropic/claude-...``,
    ``anthropic/claude-...``) names its provider; a model object whose
    client points at another host (``base_url``) is named by that host.
    """
    name = model if isinstance(model, str) else getattr(model, "model", None)
    if isinstance(name, str):
        parts = name.lower().split("/")
        if parts[0] == "litellm":
            parts = parts[1:]
        if len(parts) > 1 and parts[0] in _PREFIXES:
            return _PREFIXES[parts[0]]
    client = getattr(model, "_client", None)
    base_url = str(getattr(client, "base_url", "") or "")
    if base_url and "openai.azure.com" in base_url:
        return "azure.ai.openai"
    return "openai"


def _tool_name(tool: Any) -> str:
    name = getattr(tool, "name", None)
    return name if isinstance(name, str) and name else type(tool).__name__


def _declared_tools(agent: Agent[Any]) -> list[dict[str, Any]]:
    """The tools and handoffs an agent declares; MCP servers' tools are not among them."""
    tools: list[dict[str, Any]] = []
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            tools.append(
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": _jsonable(tool.params_json_schema),
                    "strict": tool.strict_json_schema,
                }
            )
        else:
            tools.append({"type": type(tool).__name__, "name": _tool_name(tool)})
    for target in agent.handoffs:
        if isinstance(target, Handoff):
            tools.append(
                {
                    "type": "handoff",
                    "name": target.tool_name,
                    "description": target.tool_description,
                    "agent": target.agent_name,
                }
            )
        else:
            tools.append(
                {"type": "handoff", "name": Handoff.default_tool_name(target), "agent": target.name}
            )
    return tools


def _handoff_tool_name(from_agent: Agent[Any], to_agent: Agent[Any]) -> str | None:
    for target in from_agent.handoffs:
        if isinstance(target, Handoff) and target.agent_name == to_agent.name:
            return target.tool_name
        if target is to_agent:
            return Handoff.default_tool_name(target)
    return None


def _guardrail_name(guardrail: Any) -> str:
    get_name = getattr(guardrail, "get_name", None)
    name = get_name() if callable(get_name) else getattr(guardrail, "name", None)
    return name if isinstance(name, str) and name else type(guardrail).__name__


def _tripped(error: BaseException) -> tuple[str, Any] | None:
    """The guardrail result whose tripwire raised ``error``, with its kind."""
    if isinstance(error, InputGuardrailTripwireTriggered):
        return "input", error.guardrail_result
    if isinstance(error, OutputGuardrailTripwireTriggered):
        return "output", error.guardrail_result
    if isinstance(error, ToolInputGuardrailTripwireTriggered):
        return "tool_input", _ToolTrip(error.guardrail, error.output)
    if isinstance(error, ToolOutputGuardrailTripwireTriggered):
        return "tool_output", _ToolTrip(error.guardrail, error.output)
    return None


@dataclasses.dataclass
class _ToolTrip:
    """A tool guardrail's tripwire, shaped like the results the SDK collects."""

    guardrail: Any
    output: Any


def _transfer_message(from_agent: Agent[Any], to_agent: Agent[Any]) -> str:
    """The function-call output the SDK gives the model for a handoff."""
    for target in from_agent.handoffs:
        if isinstance(target, Handoff) and target.agent_name == to_agent.name:
            return target.get_transfer_message(to_agent)
    return json.dumps({"assistant": to_agent.name})

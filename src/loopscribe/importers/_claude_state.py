"""Claude Code pairing state: the open response, its calls, each agent's context."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._model import Execution
from ._lines import format_ts, parse_ts
from ._mapper import Source

NAME = "claude-code"
TASK_TOOLS = frozenset({"Task", "Agent"})
"""Tool names that start a subagent."""
SKIPPED_TYPES = frozenset({"file-history-snapshot", "queue-operation"})

# toolUseResult is Claude Code's own structured copy of a tool's result (for
# an edit it holds the whole original file). Only these small facts are kept.
_DETAIL_STRINGS = frozenset(
    {
        "type",
        "filePath",
        "status",
        "agentId",
        "mode",
        "url",
        "codeText",
        "retrieval_status",
        "returnCodeInterpretation",
        "backgroundTaskId",
    }
)
_INTERRUPTED = "[Request interrupted by user"
_COMMAND_OUTPUT = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
)
"""User lines that hold what a slash command or ``!`` shell command printed: not a prompt."""


# -- pairing state ---------------------------------------------------------------


@dataclass(slots=True)
class _Response:
    """A model response whose lines may still continue."""

    id: str
    exec_id: str
    parent: str | None
    model: str | None
    request_id: str | None
    usage: dict[str, Any] | None
    stop_reason: str | None
    tools: bool
    ts: datetime | None
    source: Source
    execution: Execution | None = None
    error: dict[str, Any] | None = None
    """What failed, when Claude Code wrote an API error in the model's place."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "exec_id": self.exec_id,
            "parent": self.parent,
            "model": self.model,
            "request_id": self.request_id,
            "usage": self.usage,
            "stop_reason": self.stop_reason,
            "tools": self.tools,
            "ts": format_ts(self.ts),
            "source": self.source,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> _Response:
        return cls(
            id=obj["id"],
            exec_id=obj["exec_id"],
            parent=obj.get("parent"),
            model=obj.get("model"),
            request_id=obj.get("request_id"),
            usage=obj.get("usage"),
            stop_reason=obj.get("stop_reason"),
            tools=bool(obj.get("tools")),
            ts=parse_ts(obj.get("ts")),
            source=obj.get("source") or {},
            error=obj.get("error"),
        )


@dataclass(slots=True)
class AgentContext:
    """The agent a line belongs to: the main agent, or a subagent (an ``agent`` execution)."""

    agent: str | None = None
    agent_parent: str | None = None
    agent_id: str | None = None
    name: str | None = None
    response: _Response | None = None
    request_ts: datetime | None = None
    """When the last input reached this agent: where its next model call starts."""

    @property
    def execution(self) -> Execution | None:
        if self.agent is None:
            return None
        return Execution(self.agent, "agent", 1, self.agent_parent)

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "agent_parent": self.agent_parent,
            "agent_id": self.agent_id,
            "name": self.name,
            "response": None if self.response is None else self.response.to_json(),
            "request_ts": format_ts(self.request_ts),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AgentContext:
        response = obj.get("response")
        return cls(
            agent=obj.get("agent"),
            agent_parent=obj.get("agent_parent"),
            agent_id=obj.get("agent_id"),
            name=obj.get("name"),
            response=None if response is None else _Response.from_json(response),
            request_ts=parse_ts(obj.get("request_ts")),
        )


@dataclass(slots=True)
class _Call:
    """A tool call waiting for its result."""

    name: str
    parent: str
    agent_id: str | None = None
    agent_type: str | None = None
    prompt: str | None = None
    """A digest of a subagent call's prompt: what its inline sidechain begins with."""
    execution: Execution | None = None


def _details(value: Any) -> Any:
    """The small facts of ``toolUseResult`` worth keeping (never file contents)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return None
    kept = {
        k: v
        for k, v in value.items()
        if type(v) in (bool, int, float) or (k in _DETAIL_STRINGS and isinstance(v, str))
    }
    return kept or None


def _api_error(obj: Mapping[str, Any], msg: Mapping[str, Any]) -> dict[str, Any]:
    """The failure of an API error Claude Code wrote as an assistant line (``isApiErrorMessage``).

    Its ``error`` is a kind (``rate_limit``, ``authentication_failed``) or an
    object, ``apiErrorStatus`` the HTTP status, the text what the user saw.
    """
    found = obj.get("error")
    error: dict[str, Any] = dict(found) if isinstance(found, Mapping) else {}
    if isinstance(found, str) and found:
        error["type"] = found
    status = obj.get("apiErrorStatus")
    if type(status) is int:
        error.setdefault("status", status)
    if not error:
        error["type"] = "api_error"
    content = msg.get("content")
    text = content if isinstance(content, str) else _first_text(content)
    if text is not None:
        error.setdefault("message", text)
    return error


def _digest(text: Any) -> str | None:
    """A short, stable digest of a prompt (what the cursor keeps instead of the text)."""
    if not isinstance(text, str) or not text:
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _first_text(content: Any) -> str | None:
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                return text if isinstance(text, str) else None
    return None

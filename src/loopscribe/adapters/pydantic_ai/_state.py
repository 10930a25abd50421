"""What a LoopscribeCapability remembers: per loopscribe Run, per agent run, per call."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
)

from ..._hostkit import Guard, run_ids
from ..._model import Execution
from ..._session import Run

# -- state -------------------------------------------------------------------------------


class _Shared:
    """State of one capability instance, shared by its per-agent-run copies: one loopscribe Run."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.guard = Guard("pydantic-ai capability")
        self.lock = threading.Lock()
        # Execution-id counters and call attempts of the Run, shared by every way in.
        self.ids = run_ids(run)

    def next_tool_attempt(self, call_id: str) -> int:
        """The attempt of a tool call: a call id seen again in the run is its next attempt."""
        return self.ids.attempt(call_id)


@dataclass(slots=True)
class _ModelAttempt:
    execution: Execution
    recorded: bool = False
    ended: bool = False
    error: dict[str, Any] | None = None


@dataclass(slots=True)
class _ToolCall:
    execution: Execution
    name: str
    step: int
    retry: int = 0
    max_retries: int = 0
    ended: bool = False
    error: dict[str, Any] | None = None
    running: bool = False
    """The tool function was called (``wrap_tool_execute``) and has not returned."""


@dataclass(slots=True)
class _AgentRun:
    """What one pydantic-ai run has recorded so far."""

    agent: Execution
    name: str
    run_id: str | None
    history: list[ModelMessage]
    # Messages already written (or committed before this run), by identity. The
    # values keep them alive, so an ID is never reused by a new message.
    seen: dict[int, ModelMessage] = field(default_factory=dict)
    responses: dict[int, Execution] = field(default_factory=dict)
    turn: Execution | None = None
    turn_number: int = 0
    turns: int = 0
    turn_tool_calls: int = 0
    turn_stop_reason: str | None = None
    model: _ModelAttempt | None = None
    last_model: Execution | None = None
    last_stop_reason: str | None = None
    tools: dict[str, _ToolCall] = field(default_factory=dict)

    def mark_seen(self, messages: Iterable[ModelMessage]) -> None:
        for message in messages:
            self.seen[id(message)] = message


# The tool call running on this task, so a delegate agent run started inside a
# tool nests under it. Keyed by the shared recorder: a delegate recorded into
# another loopscribe Run cannot name a parent in this one.
_CURRENT_TOOL: contextvars.ContextVar[tuple[_Shared, str] | None] = contextvars.ContextVar(
    "loopscribe_pydantic_ai_tool", default=None
)

"""One execution attempt of a run as a bar on its timeline: a span, drawn.

Its labels (model, provider, tool, agent, token counts, ``error.type``) are
taken the way the span bridge takes them; the one fold of attempts
(``_attempts``) decides where it starts and ends, its parent and its outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from . import events as ev
from ._cost import ZERO, Cost, call_cost
from ._fields import TokenUsage, node_name, plain, response_labels, span_name, text
from ._model import Execution, Record

__all__ = ["Bar", "BarState", "epoch_us", "iso"]

BarState = Literal["ok", "error", "open", "incomplete"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def epoch_us(ts: datetime) -> int:
    """Microseconds since the Unix epoch (integer arithmetic, no float rounding)."""
    return (ts - _EPOCH) // _MICROSECOND


def iso(ts: datetime | None) -> str | None:
    """A timestamp as stored in session files (UTC, ``Z``)."""
    return None if ts is None else ts.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class Bar:
    """One execution attempt: a span in the trace backend, a bar on the timeline."""

    execution: Execution
    span_id: int
    parent_span_id: int
    order: int
    start: datetime
    seq_first: int
    seq_last: int
    end: datetime | None = None
    state: BarState = "open"
    error_type: str | None = None
    seqs: list[int] = field(default_factory=list)
    model: str | None = None
    response_model: str | None = None
    provider: str | None = None
    tool: str | None = None
    agent: str | None = None
    node: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    usage: TokenUsage | None = None
    """Every token count of a model call (cache and reasoning too), for its cost."""
    retried: bool = False
    """A later attempt of the same execution exists."""
    input_seq: int | None = None
    """The record that says what went in (``model_request``, ``tool_exec_start``)."""
    end_seq: int | None = None
    """The terminal record."""
    preview: str | None = None
    """One line of what went in: the prompt, the tool's arguments (read on demand)."""
    outcome: str | None = None
    """One line of what came out: the reply, the result, the error's message (on demand)."""
    error_text: str | None = None
    """The error's message (or an ``is_error`` result), for a failed attempt (on demand)."""
    previewed: bool = False
    """The three previews above were read from the file."""
    committed: bool = False
    """A ``message_end`` of this attempt committed its message."""

    @property
    def key(self) -> tuple[str, int]:
        """``(execution id, attempt)``."""
        return self.execution.id, self.execution.attempt

    @property
    def name(self) -> str:
        """The span's name, as the bridge gives it."""
        return span_name(
            self.execution.kind,
            model=self.model or self.response_model,
            tool=self.tool,
            agent=self.agent,
            node=self.node,
        )

    @property
    def label(self) -> str:
        """A short label for a timeline row."""
        ex = self.execution
        if ex.kind == "model":
            return self.response_model or self.model or ex.id
        if ex.kind == "tool":
            return self.tool or ex.id
        if ex.kind == "agent" and self.agent:
            return self.agent
        return ex.id

    @property
    def cost(self) -> Cost:
        """A model call's cost from its usage, at the prices of its time (``docs/cost.md``)."""
        if self.execution.kind != "model":
            return ZERO
        return call_cost(self.response_model or self.model, self.provider, self.usage, self.start)

    def duration_us(self, now: datetime) -> int:
        """Microseconds from start to end (or to ``now`` while open); never negative."""
        return max(0, epoch_us(self.end or now) - epoch_us(self.start))

    def absorb(self, record: Record) -> None:
        """Take the labels a record holds (never a body), like the span bridge."""
        data = record.data
        kind = record.type
        if self.node is None:
            self.node = node_name(data)
        if kind in (ev.MODEL_EXEC_START, ev.MODEL_ROUTE, ev.MODEL_REQUEST):
            self.model = text(plain(data.get("model"))) or self.model
            self.provider = text(plain(data.get("provider"))) or self.provider
        elif kind == ev.MODEL_EXEC_END:
            labels = response_labels(data)
            self.response_model = labels.model or self.response_model
            self.provider = self.provider or labels.provider
            usage = labels.usage
            if usage is not None:
                self.usage = usage
                self.input_tokens = usage.input_tokens
                self.output_tokens = usage.output_tokens
        elif kind in (ev.TOOL_EXEC_START, ev.TOOL_INVOKE_START, ev.TOOL_EXEC_END):
            self.tool = text(plain(data.get("tool"))) or self.tool
        elif kind in (ev.AGENT_START, ev.AGENT_END):
            self.agent = self.agent or text(plain(data.get("agent")))

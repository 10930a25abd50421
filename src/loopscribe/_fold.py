"""A session's summary, folded from its records: what a workspace lists and shows.

:class:`SessionFold` advances record by record (from the last byte offset as a
file grows); :class:`SessionSummary` is what it yields. The workspace, the
store's workspace and the shipper's manifests all fold the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from . import events as ev
from ._cost import ZERO, Cost, call_cost
from ._fields import field as get_field
from ._fields import plain, text, token_usage

IMPORT_SETTLE_SECONDS = 1800.0
"""An imported transcript whose last timestamp is older than this has finished its turn."""

Status = Literal["running", "interrupted", "failed", "idle"]
"""The one vocabulary of a session's state, in the CLI, ``--json``, the viewer and the docs.

``running``: a run (an agent's turn) is open and its writer is alive; for an
imported transcript, its turn is open and its own last record is less than
:data:`IMPORT_SETTLE_SECONDS` old. ``interrupted``: a run is open but nothing
writes it any more (the process died, or the transcript stopped mid-turn).
``failed``: the last run ended with an error (``agent_end`` with an error or
``stop_reason`` "error", or, without ``agent_end``, a failed last
``model_exec_end``). ``idle``: otherwise (the last turn is over)."""


@dataclass(frozen=True, slots=True)
class Compaction:
    """The latest compaction: the conversation before it is replaced by a summary.

    Attributes:
        at: When it was recorded.
        seq: Its record's seq (``-1`` when it came from the side log).
        messages_before: Messages committed before it.
        summary: The summary's text (a message's text when it is a message).
        keep_last: Messages before it kept verbatim after the summary.
    """

    at: datetime
    seq: int
    messages_before: int
    summary: str | None = None
    keep_last: int = 0


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """What a session list shows, folded from a session file's records.

    ``path`` is the session's URL (``<store>/sessions/<id>``) when it was read
    from a store.
    """

    id: str
    path: Path | str
    created: datetime
    updated: datetime
    status: Status
    title: str | None = None
    model: str | None = None
    provider: str | None = None
    mode: str | None = None
    role: str | None = None
    agent_name: str | None = None
    color: str | None = None
    skills: tuple[str, ...] = ()
    parent_id: str | None = None
    source: str | None = None
    result: str | None = None
    state: str | None = None
    message_count: int = 0
    """Messages a reader sees now: after a compaction, the summary, the kept ones and later."""
    messages_total: int = 0
    """Messages ever committed, compacted away or not."""
    input_tokens: int = 0
    output_tokens: int = 0
    runs: int = 0
    records: int = 0
    todos: tuple[Mapping[str, Any], ...] = ()
    compaction: Compaction | None = None
    cost: Cost = ZERO
    """What the model calls cost, priced from their usage when folded (``docs/cost.md``)."""


@dataclass(slots=True)
class SessionFold:
    """The running summary of one file, advanced record by record."""

    id: str = ""
    created: datetime | None = None
    updated: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    seen_model: str | None = None
    seen_provider: str | None = None
    cost: Cost = ZERO
    messages: int = 0
    visible_from: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    runs: int = 0
    run_open: bool = False
    records: int = 0
    todos: tuple[Mapping[str, Any], ...] = ()
    todos_at: datetime | None = None
    meta_at: dict[str, datetime] = field(default_factory=dict)
    compaction: Compaction | None = None
    first_user_text: str | None = None
    run_error: bool = False
    run_agent_end: bool = False
    last_run_failed: bool = False

    def feed(
        self,
        kind: str,
        seq: int,
        ts: datetime,
        data: Mapping[str, Any],
        sid: str,
        top: bool = True,
    ) -> None:
        self.records += 1
        self.updated = ts
        if kind == ev.SESSION_START:
            self.id, self.created = sid, ts
            self.meta.update(data.get("metadata") or {})
        elif kind in _FACTS:
            self.fact(kind, seq, ts, data)
        elif kind == ev.MESSAGE_END:
            self.messages += 1
            if self.first_user_text is None:
                self.first_user_text = _user_text(plain(data.get("message")))
        elif kind in (ev.MODEL_EXEC_START, ev.MODEL_REQUEST):
            self.seen_model = text(plain(data.get("model"))) or self.seen_model
            self.seen_provider = text(plain(data.get("provider"))) or self.seen_provider
        elif kind == ev.MODEL_EXEC_END:
            message = plain(data.get("message"))
            usage = token_usage(plain(data.get("usage")))
            if usage is None:
                usage = token_usage(get_field(message, "usage"))
            if usage is not None:
                self.input_tokens += usage.input_tokens or 0
                self.output_tokens += usage.output_tokens or 0
                model = text(get_field(message, "model")) or self.seen_model
                self.cost += call_cost(model, self.seen_provider, usage, ts)
            if not self.run_agent_end:
                # A standalone call: its outcome is the run's, unless an agent_end says.
                self.run_error = data.get("error") is not None
        elif kind == ev.AGENT_END and top:
            # The top-level agent decides the run's outcome; nested agents end inside it.
            self.run_agent_end = True
            self.run_error = data.get("error") is not None or data.get("stop_reason") == "error"
        elif kind == ev.RUN_START:
            self.runs += 1
            self.run_open = True
            self.run_error = self.run_agent_end = False
        elif kind == ev.RUN_CLOSE:
            self.run_open = False
            self.last_run_failed = self.run_error

    def fact(self, kind: str, seq: int, ts: datetime, data: Mapping[str, Any]) -> None:
        """A session-level fact, from the file or the side log; the newer one wins."""
        if kind == ev.SESSION_UPDATE:
            for name, value in (data.get("fields") or {}).items():
                at = self.meta_at.get(name)
                if at is None or at <= ts:
                    self.meta[name] = value
                    self.meta_at[name] = ts
        elif kind == ev.TODOS:
            if self.todos_at is None or self.todos_at <= ts:
                self.todos = tuple(data.get("todos") or ())
                self.todos_at = ts
        elif kind == ev.COMPACTION and (self.compaction is None or self.compaction.at <= ts):
            summary = plain(data.get("summary"))
            before = data.get("messages_before")
            self.compaction = Compaction(
                ts,
                seq,
                before if isinstance(before, int) else self.messages,
                summary if isinstance(summary, str) else _message_text(summary),
                positive_int(data.get("keep_last")),
            )

    def summary(self, path: Path, status: Status) -> SessionSummary:
        meta = self.meta
        created = self.created or datetime.fromtimestamp(0, UTC)
        skills = meta.get("skills") or ()
        visible = self.messages
        if self.compaction is not None:
            c = self.compaction
            visible = 1 + min(c.keep_last, c.messages_before) + self.messages - c.messages_before
        return SessionSummary(
            id=self.id,
            path=path,
            created=created,
            updated=self.updated or created,
            status=status,
            title=_opt_str(meta.get("title")) or _title_from(self.first_user_text),
            model=_opt_str(meta.get("model")) or self.seen_model,
            provider=_opt_str(meta.get("provider")),
            mode=_opt_str(meta.get("mode")),
            role=_opt_str(meta.get("role")),
            agent_name=_opt_str(meta.get("agent_name")),
            color=_opt_str(meta.get("color")),
            skills=tuple(str(s) for s in skills) if isinstance(skills, list | tuple) else (),
            parent_id=_opt_str(meta.get("parent_id")),
            source=_opt_str(meta.get("source")),
            result=_opt_str(meta.get("result")),
            state=_opt_str(meta.get("state")),
            message_count=visible,
            messages_total=self.messages,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            runs=self.runs,
            records=self.records,
            todos=self.todos,
            compaction=self.compaction,
            cost=self.cost,
        )


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


_FACTS = frozenset({ev.SESSION_UPDATE, ev.TODOS, ev.COMPACTION})
_TITLE_CHARS = 80


def positive_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def stored_count(value: Any) -> int | None:
    """A stored message count, or ``None`` if it is missing or not a count."""
    return value if type(value) is int and value >= 0 else None


def _message_text(message: Any) -> str | None:
    """The text parts of a message (stored form or object), joined; ``None`` if none."""
    if message is None:
        return None
    content = get_field(message, "content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list | tuple):
        parts = [get_field(part, "text") for part in content]
        joined = "".join(p for p in parts if isinstance(p, str))
        return joined or None
    return None


def _user_text(message: Any) -> str | None:
    if get_field(message, "role") != "user":
        return None
    return _message_text(message)


def _title_from(first_user_text: str | None) -> str | None:
    """A title derived from the first user message: its first line, shortened."""
    if not first_user_text:
        return None
    line = " ".join(first_user_text.split())
    if len(line) <= _TITLE_CHARS:
        return line or None
    return line[: _TITLE_CHARS - 1].rstrip() + "…"

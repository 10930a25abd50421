"""Statistics of session files: per session and run, what a person debugging asks first.

Duration, model calls, tool calls, errors, retries, tokens by model and the
slowest executions, folded from the same run timeline the viewer draws (so
every number matches a span): each execution attempt counts as one call, a
retry is an attempt after the first, an error is an attempt whose terminal
record carries ``error`` or ``is_error``. The slowest executions are the
slowest attempts that contain no other execution, because an agent or a turn
would otherwise always win; an attempt without a duration (its start and end at
the same instant, as imported transcripts record many tools) is counted in
``untimed``, never ranked.

Memory is bounded by a run, not by the file: :func:`session_stats` folds the
file run by run and, as each run closes, keeps its numbers and drops its bars.
A record that arrives for a run already closed (rare: a late ``message_end``
or ``retry_scheduled``) can change that run's numbers, so then the file is
folded again whole, which gives the same numbers the viewer shows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ._cost import ZERO, Cost, call_cost
from ._errors import FormatError

if TYPE_CHECKING:
    from ._timeline import RunTimeline, SessionTimeline

# loopscribe.viewer re-exports this module's API, and its timeline is what
# this module folds: importing the timeline when it is first used, not at
# import time, keeps the two from importing each other in a circle.

__all__ = ["ModelTokens", "RunStats", "SessionStats", "SlowExecution", "session_stats"]

DEFAULT_TOP = 5
"""How many slowest executions are kept per run."""


@dataclass(frozen=True, slots=True)
class ModelTokens:
    """Token usage of one model in a run."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: Cost = ZERO
    """What the calls cost (``docs/cost.md``): computed from usage, never recorded."""

    def to_json(self) -> dict[str, Any]:
        """The model's numbers as JSON; ``cost_usd`` is ``"unknown"`` when nothing was priced."""
        return {
            "model": self.model,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost.to_json(),
            "cost_unknown_calls": self.cost.unknown,
        }


@dataclass(frozen=True, slots=True)
class SlowExecution:
    """One of a run's slowest execution attempts."""

    execution_id: str
    kind: str
    attempt: int
    name: str
    duration_us: int
    state: str
    span_id: str
    first_seq: int


@dataclass(frozen=True, slots=True)
class RunStats:
    """The numbers of one run."""

    run_id: str
    trace_id: str
    agent: str | None
    start: datetime
    end: datetime | None
    duration_us: int
    state: str
    model_calls: int
    tool_calls: int
    errors: int
    retries: int
    tokens: tuple[ModelTokens, ...]
    slowest: tuple[SlowExecution, ...]
    untimed: int = 0
    """Executions without a duration (start and end at the same instant, as an
    imported transcript often records a tool): counted, never ranked as slowest."""

    @property
    def input_tokens(self) -> int:
        """Input tokens of every model."""
        return sum(t.input_tokens for t in self.tokens)

    @property
    def output_tokens(self) -> int:
        """Output tokens of every model."""
        return sum(t.output_tokens for t in self.tokens)

    @property
    def cost(self) -> Cost:
        """What the run's model calls cost."""
        return sum((t.cost for t in self.tokens), ZERO)

    def to_json(self) -> dict[str, Any]:
        """The run's numbers as JSON."""
        from ._timeline import iso

        return {
            "run_id": self.run_id,
            "trace_id": self.trace_id,
            "agent": self.agent,
            "start": iso(self.start),
            "end": iso(self.end),
            "duration_us": self.duration_us,
            "state": self.state,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "errors": self.errors,
            "retries": self.retries,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost.to_json(),
            "cost_unknown_calls": self.cost.unknown,
            "tokens_by_model": [t.to_json() for t in self.tokens],
            "slowest": [
                {
                    "execution_id": s.execution_id,
                    "kind": s.kind,
                    "attempt": s.attempt,
                    "name": s.name,
                    "duration_us": s.duration_us,
                    "state": s.state,
                    "span_id": s.span_id,
                    "seq": s.first_seq,
                }
                for s in self.slowest
            ],
            "untimed": self.untimed,
        }


@dataclass(frozen=True, slots=True)
class SessionStats:
    """The numbers of one session file, run by run."""

    session_id: str
    path: Path
    title: str | None
    records: int
    runs: tuple[RunStats, ...]

    @property
    def duration_us(self) -> int:
        """Time spent in runs (their durations added up)."""
        return sum(r.duration_us for r in self.runs)

    def total(self, name: str) -> int:
        """A count added up over the runs: ``model_calls``, ``errors``, ``input_tokens``, ..."""
        return sum(int(getattr(r, name)) for r in self.runs)

    @property
    def cost(self) -> Cost:
        """What the session's model calls cost."""
        return sum((r.cost for r in self.runs), ZERO)

    def tokens_by_model(self) -> tuple[ModelTokens, ...]:
        """Token usage (and cost) per model over every run."""
        merged: dict[str, ModelTokens] = {}
        for run in self.runs:
            for t in run.tokens:
                acc = merged.get(t.model)
                merged[t.model] = t if acc is None else _merged(acc, t)
        return tuple(merged[m] for m in sorted(merged))

    def to_json(self) -> dict[str, Any]:
        """The session's numbers as JSON (one object, runs nested)."""
        return {**self._totals_json(), "runs": [r.to_json() for r in self.runs]}

    def json_parts(self) -> Iterator[bytes]:
        """:meth:`to_json` as JSON text, a run at a time: the same bytes as
        ``orjson.dumps(self.to_json())``, without every run's object held at once."""
        yield orjson.dumps(self._totals_json())[:-1] + b',"runs":['
        for number, run in enumerate(self.runs):
            yield (b"," if number else b"") + orjson.dumps(run.to_json())
        yield b"]}"

    def _totals_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "file": str(self.path),
            "title": self.title,
            "records": self.records,
            "duration_us": self.duration_us,
            "model_calls": self.total("model_calls"),
            "tool_calls": self.total("tool_calls"),
            "errors": self.total("errors"),
            "retries": self.total("retries"),
            "input_tokens": self.total("input_tokens"),
            "output_tokens": self.total("output_tokens"),
            "cost_usd": self.cost.to_json(),
            "cost_unknown_calls": self.cost.unknown,
            "tokens_by_model": [t.to_json() for t in self.tokens_by_model()],
        }


def _merged(a: ModelTokens, b: ModelTokens) -> ModelTokens:
    return ModelTokens(
        a.model,
        a.calls + b.calls,
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cost + b.cost,
    )


def run_stats(run: RunTimeline, *, top: int = DEFAULT_TOP, cost: bool = True) -> RunStats:
    """The numbers of one run's timeline; ``cost=False`` leaves the costs out (all zero)."""
    bars = list(run.bars.values())
    tokens: dict[str, list[Any]] = {}
    for bar in bars:
        if bar.execution.kind != "model":
            continue
        model = bar.response_model or bar.model
        acc = tokens.setdefault(model or "(unknown model)", [0, 0, 0, ZERO])
        acc[0] += 1
        acc[1] += bar.input_tokens or 0
        acc[2] += bar.output_tokens or 0
        if cost:
            acc[3] += call_cost(model, bar.provider, bar.usage, bar.start)
    parents = {bar.execution.parent_id for bar in bars}
    now = run.final_ts
    leaves = [bar for bar in bars if bar.execution.id not in parents]
    timed = [bar for bar in leaves if bar.end is None or bar.duration_us(now) > 0]
    timed.sort(key=lambda b: (-b.duration_us(now), b.order))
    counts = run.counts()
    return RunStats(
        run_id=run.run_id,
        trace_id=f"{run.trace_id:032x}",
        agent=run.agent,
        start=run.start,
        end=run.end,
        duration_us=run.duration_us(),
        state=run.state,
        model_calls=counts["model_calls"],
        tool_calls=counts["tool_calls"],
        errors=counts["errors"],
        retries=counts["retries"],
        tokens=tuple(ModelTokens(m, c, i, o, p) for m, (c, i, o, p) in sorted(tokens.items())),
        slowest=tuple(
            SlowExecution(
                execution_id=b.execution.id,
                kind=b.execution.kind,
                attempt=b.execution.attempt,
                name=b.name,
                duration_us=b.duration_us(now),
                state=b.state,
                span_id=f"{b.span_id:016x}",
                first_seq=b.seq_first,
            )
            for b in timed[: max(top, 0)]
        ),
        untimed=len(leaves) - len(timed),
    )


def timeline_stats(
    timeline: SessionTimeline, *, top: int = DEFAULT_TOP, cost: bool = True
) -> SessionStats:
    """The numbers of a folded session file."""
    return SessionStats(
        session_id=timeline.session_id,
        path=timeline.path,
        title=timeline.title,
        records=timeline.records,
        runs=tuple(run_stats(r, top=top, cost=cost) for r in timeline.iter_runs()),
    )


class _LateRecord(Exception):
    """A record for a run whose bars were dropped: fold the whole file instead."""


def _streamed(path: str | os.PathLike[str], top: int, cost: bool) -> SessionStats:
    """Fold ``path`` keeping only the open runs' bars; raises :class:`_LateRecord`."""
    from . import events as ev
    from ._timeline import SessionTimeline

    class Fold(SessionTimeline):
        done: dict[str, RunStats]
        order: dict[str, None]

        def _feed(self, record: Any) -> None:
            run_id = record.run_id
            if run_id is None:
                super()._feed(record)
                return
            if run_id in self.done:
                raise _LateRecord
            super()._feed(record)
            if run_id not in self.order:
                self.order[run_id] = None  # the runs in the order they started
            if record.type == ev.RUN_CLOSE:
                # Its numbers are all that is kept: the run's timeline goes, its
                # fold and bars first (they refer to each other: no wait for the GC).
                run = self.runs.pop(run_id)
                self.done[run_id] = run_stats(run, top=top, cost=cost)
                run.bars, run.by_span, run.fold = {}, {}, None

    fold = Fold(path, index=False)  # counts only: no record offsets, no conversation scopes
    fold.done, fold.order = {}, {}
    fold.refresh()
    return SessionStats(
        session_id=fold.session_id,
        path=fold.path,
        title=fold.title,
        records=fold.records,
        runs=tuple(
            fold.done[r] if r in fold.done else run_stats(fold.runs[r], top=top, cost=cost)
            for r in fold.order
        ),
    )


def session_stats(
    path: str | os.PathLike[str], *, top: int = DEFAULT_TOP, cost: bool = True
) -> SessionStats:
    """The numbers of one session file.

    Args:
        path: The session file.
        top: How many slowest executions to keep per run.
        cost: Price the model calls (``docs/cost.md``).

    Raises:
        CorruptRecordError: A complete line is damaged.
        FormatError: The file is not a session file.
        OSError: The file cannot be read.
    """
    from ._timeline import load_timeline

    try:
        return _streamed(path, top, cost)
    except _LateRecord:
        return timeline_stats(load_timeline(path), top=top, cost=cost)


def many_stats(
    paths: Iterable[Path],
    *,
    top: int = DEFAULT_TOP,
    on_file: Callable[[Path, int], None] | None = None,
    cost: bool = True,
) -> Iterator[SessionStats | tuple[Path, Exception]]:
    """Stats of several files, one at a time; a file that fails yields ``(path, error)``.

    Args:
        paths: Session files.
        top: How many slowest executions to keep per run.
        on_file: Called with each path and its size once it was read (progress).
        cost: Price the model calls.
    """
    for path in paths:
        try:
            stats = session_stats(path, top=top, cost=cost)
        except (FormatError, OSError) as exc:
            yield path, exc
            continue
        if on_file is not None:
            on_file(path, stats_size(path))
        yield stats


def stats_size(path: Path) -> int:
    """A file's size, 0 if it vanished."""
    try:
        return path.stat().st_size
    except OSError:
        return 0

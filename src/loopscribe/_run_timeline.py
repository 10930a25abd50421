"""One run on the timeline: its bars in rows, its minimap, counts, cost and previews.

What the viewer's run page and ``report`` show of a run, built from the bars
that ``SessionTimeline`` folds, cached until the run grows; previews are read
back from the file one record at a time, for the bars a page shows.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import events as ev
from ._attempts import AttemptFold
from ._bars import Bar, BarState, epoch_us, iso
from ._cost import ZERO, Cost
from ._preview import error_text, preview, snippet
from ._runnames import run_names

__all__ = ["MINIMAP_BUCKETS", "RunTimeline"]

MINIMAP_BUCKETS = 240
"""Time buckets of a run's minimap: attempts started, and failed attempts, per bucket."""
_ERRORS_LISTED = 500
"""Failed attempts a timeline lists by name; the minimap still counts every one."""
_PROMPT_LOOKBACK = 200
"""Committed messages read back at most for an imported call's prompt preview."""


@dataclass(slots=True)
class RunTimeline:
    """One run: its trace, its bars in start order, and its own records."""

    session_id: str
    run_id: str
    trace_id: int
    span_id: int
    host_span_id: int | None
    start: datetime
    seq_first: int
    seq_last: int
    last_ts: datetime
    end: datetime | None = None
    agent: str | None = None
    error_type: str | None = None
    bars: dict[tuple[str, int], Bar] = field(default_factory=dict)
    records: list[int] = field(default_factory=list)
    """Seqs of the run's records outside any execution (run_start, checkpoints, ...)."""
    fold: AttemptFold[Bar] | None = None
    """The run's execution attempts as they come (see ``_attempts``): each new one a bar."""
    by_span: dict[int, tuple[str, int]] = field(default_factory=dict)
    commits: bool = False
    """The run has ``message_end`` records: its host commits messages."""
    reader: Callable[[int], Mapping[str, Any] | None] | None = None
    """Reads one record (parsed) by seq, for the previews of the bars a page shows."""
    committed: array[int] = field(default_factory=lambda: array("q"))
    """Seqs of the run's ``message_end`` records: the prompt preview of a call recorded
    without messages (an imported one) is the last user message committed before it."""
    compactions: array[int] | None = None
    """The session's ``compaction`` seqs: a context, and so that search, starts anew there."""
    _prompts: dict[int, str | None] = field(default_factory=dict)
    """``committed`` index → the prompt found searching back from there (one compaction
    context per index: a search never crosses one, so the memo holds across them)."""
    names: tuple[tuple[int, int], dict[str, Any]] | None = None
    """What the run is called (see ``_names.run_names``), and when that was read."""
    _rows: tuple[tuple[int, int], list[tuple[int, str, list[Bar]]]] | None = None
    _derived: tuple[tuple[int, int, int], dict[str, Any]] | None = None
    summary: tuple[tuple[int, int, int], dict[str, Any]] | None = None
    """What the session page lists of the run, and the state it was built from (a
    page lists every run: a run unchanged since is not walked again)."""

    @property
    def closed(self) -> bool:
        """``run_close`` was written."""
        return self.end is not None

    @property
    def state(self) -> BarState:
        """The run's outcome: ``error`` from the top-level agent, ``open`` until run_close."""
        if self.error_type:
            return "error"
        return "ok" if self.closed else "open"

    @property
    def first_ts(self) -> datetime:
        """The earliest time on the run's timeline (source clocks may precede run_start)."""
        starts = [bar.start for bar in self.bars.values()]
        return min([self.start, *starts])

    @property
    def final_ts(self) -> datetime:
        """The latest time on the run's timeline: run_close, or the newest record so far."""
        ends = [bar.end for bar in self.bars.values() if bar.end is not None]
        return max([self.end or self.last_ts, self.last_ts, *ends])

    def duration_us(self) -> int:
        """Microseconds covered by the timeline."""
        return max(0, epoch_us(self.final_ts) - epoch_us(self.first_ts))

    def bar_of_span(self, span: int) -> Bar | None:
        """The bar of an execution span ID, or ``None``."""
        key = self.by_span.get(span)
        return None if key is None else self.bars.get(key)

    def rows(self) -> list[tuple[int, str, list[Bar]]]:
        """Timeline rows, depth first: ``(depth, execution id, its attempts)``.

        All attempts of one execution share a row, so a retry sits beside the
        attempt it replaces; children follow their parent, in start order.
        The result is cached until the run grows.
        """
        stamp = (len(self.bars), self.seq_last)
        if self._rows is not None and self._rows[0] == stamp:
            return self._rows[1]
        rows = self._build_rows()
        self._rows = (stamp, rows)
        return rows

    def _build_rows(self) -> list[tuple[int, str, list[Bar]]]:
        attempts: dict[str, list[Bar]] = {}
        for bar in self.bars.values():  # inserted as they started: in ``order``
            found = attempts.get(bar.execution.id)
            if found is None:
                attempts[bar.execution.id] = [bar]
            else:
                found.append(bar)
        children: dict[str | None, list[str]] = {}
        for exec_id, bars in attempts.items():
            parent = bars[0].execution.parent_id
            if parent is not None and (parent not in attempts or parent == exec_id):
                parent = None  # the parent left no record: show it at the top
            children.setdefault(parent, []).append(exec_id)
        out: list[tuple[int, str, list[Bar]]] = []
        seen: set[str] = set()
        stack = [(0, exec_id) for exec_id in reversed(children.get(None, []))]
        while stack:
            depth, exec_id = stack.pop()
            if exec_id in seen:
                continue
            seen.add(exec_id)
            out.append((depth, exec_id, attempts[exec_id]))
            below = children.get(exec_id)
            if below:
                stack.extend([(depth + 1, c) for c in reversed(below)])
        # Executions only reachable through a parent cycle: still show them.
        out.extend((0, e, attempts[e]) for e in attempts if e not in seen)
        return out

    def to_json(
        self,
        *,
        offset: int = 0,
        limit: int | None = None,
        collapsed: frozenset[str] = frozenset(),
        select: int | None = None,
    ) -> dict[str, Any]:
        """The run as the viewer's timeline JSON: references, labels and previews, never bodies.

        Args:
            offset: The first visible row to include.
            limit: How many visible rows to include (``None``: all). A run of
                100,000 tool calls is sent a page at a time.
            collapsed: Execution IDs whose subtrees are folded into their row.
            select: A span ID to show: its page is returned (``offset`` is
                moved to it) and any collapsed row hiding it is opened.

        Returns:
            The run's labels and counts, ``rows`` (the page), ``total_rows``
            (visible rows in all), ``minimap`` (bars and errors per time
            bucket over the whole run) and ``errors`` (the failed attempts).
        """
        derived = self._derive()
        t0, final = derived["t0"], derived["final"]
        every = self.rows()
        sizes = derived["sizes"]
        where = None
        if select is not None and (key := self.by_span.get(select)) is not None:
            where = next((i for i, row in enumerate(every) if row[1] == key[0]), None)
        if where is not None and collapsed:
            collapsed = collapsed - _ancestors(every, where)
        visible = _visible(every, sizes, collapsed)
        if limit is None:
            offset, page = 0, visible
        else:
            limit = max(1, limit)
            if where is not None and where in visible:
                offset = visible.index(where) // limit * limit
            offset = max(0, min(offset, max(0, len(visible) - 1) // limit * limit))
            page = visible[offset : offset + limit]
        self._fill_previews([bar for index in page for bar in every[index][2]])
        rows = []
        for index in page:
            depth, exec_id, bars = every[index]
            rows.append(
                {
                    "id": exec_id,
                    "kind": bars[0].execution.kind,
                    "depth": depth,
                    "label": bars[-1].label,
                    "leaf": sizes[index] == 0,
                    "descendants": sizes[index],
                    "collapsed": exec_id in collapsed and sizes[index] > 0,
                    "index": index,
                    "bars": [_bar_json(bar, t0, final) for bar in bars],
                }
            )
        duration = self.duration_us()
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "trace_id": f"{self.trace_id:032x}",
            "span_id": f"{self.span_id:016x}",
            "host_span_id": None if self.host_span_id is None else f"{self.host_span_id:016x}",
            "start": iso(self.start),
            "end": iso(self.end),
            "t0": iso(self.first_ts),
            "duration_us": duration,
            "closed": self.closed,
            "state": self.state,
            "agent": self.agent,
            **run_names(self),
            "error_type": self.error_type,
            "seq_first": self.seq_first,
            "seq_last": self.seq_last,
            "records": list(self.records),
            "rows": rows,
            "offset": offset,
            "limit": limit,
            "total_rows": len(visible),
            "all_rows": len(every),
            "collapsed": sorted(collapsed),
            "minimap": derived["minimap"],
            "errors": self._errors(derived["errors"], t0, final),
            "counts": derived["counts"],
            "cost_usd": derived["cost"].to_json(),
            "cost_text": derived["cost"].text(),
        }

    def cost(self) -> Cost:
        """What the run's model calls cost."""
        return sum((bar.cost for bar in self.bars.values()), ZERO)

    def _minimap(self, t0: int, final: datetime, duration: int) -> dict[str, Any]:
        buckets = MINIMAP_BUCKETS
        bars = [0] * buckets
        errors = [0] * buckets
        scale = buckets / max(duration, 1)
        end_us = epoch_us(final)
        for bar in self.bars.values():
            start = epoch_us(bar.start) - t0
            end = epoch_us(bar.end) - t0 if bar.end is not None else end_us - t0
            first = min(buckets - 1, max(0, int(start * scale)))
            if bar.state != "error":
                bars[first] += 1  # activity: where attempts start
                continue
            last = min(buckets - 1, max(first, int(end * scale)))
            for i in range(first, last + 1):
                errors[i] += 1  # a failure covers its whole time
        return {"buckets": buckets, "bars": bars, "errors": errors}

    def _derive(self) -> dict[str, Any]:
        """What every page of the timeline shares, cached until the run changes."""
        stamp = (len(self.bars), self.seq_last, self._ended())
        if self._derived is not None and self._derived[0] == stamp:
            return self._derived[1]
        t0 = epoch_us(self.first_ts)
        final = self.final_ts
        duration = self.duration_us()
        failed = [bar for bar in self.bars.values() if bar.state == "error"]
        derived = {
            "t0": t0,
            "final": final,
            "sizes": _subtree_sizes(self.rows()),
            "minimap": self._minimap(t0, final, duration),
            "errors": failed[:_ERRORS_LISTED],
            "counts": self.counts(),
            "cost": self.cost(),
        }
        self._derived = (stamp, derived)
        return derived

    def warm(self) -> None:
        """Build what every page of the timeline shares now (rows, minimap, counts)."""
        self._derive()

    def _ended(self) -> int:
        return -1 if self.end is None else epoch_us(self.end)

    def stamp(self) -> tuple[int, int, int]:
        """Changes whenever the run does: its bars, its last record, its end."""
        return (len(self.bars), self.seq_last, self._ended())

    def _fill_previews(self, bars: list[Bar]) -> None:
        """Read the one-line previews of ``bars`` from their records (once per bar)."""
        if self.reader is None:
            return
        for bar in bars:
            if bar.previewed or (bar.input_seq is None and bar.end_seq is None):
                continue
            if bar.input_seq is not None:
                record = self.reader(bar.input_seq)
                if record is not None:
                    kind, data = str(record.get("type")), _mapping(record.get("data"))
                    bar.preview = preview(kind, data)
                    if bar.preview is None and kind == ev.MODEL_REQUEST:
                        bar.preview = self._committed_prompt(bar.input_seq)
            if bar.end_seq is not None:
                record = self.reader(bar.end_seq)
                if record is not None:
                    data = _mapping(record.get("data"))
                    bar.outcome = preview(str(record.get("type")), data)
                    if bar.state == "error":
                        bar.error_text = error_text(data) or bar.outcome
            bar.previewed = bar.end_seq is not None

    def _committed_prompt(self, seq: int) -> str | None:
        """The prompt of a call recorded without messages (an imported one).

        As :func:`preview` gives a recorded request's last user message, this
        is the last user message the run committed before record ``seq``, since
        the session's last compaction. The search reads back at most
        ``_PROMPT_LOOKBACK`` commits, and remembers what it found from each, so
        the bars of one long turn share one search.
        """
        if self.reader is None:
            return None
        at = bisect.bisect_left(self.committed, seq)
        bound = 0  # where this call's context starts among the run's commits
        compacted = bisect.bisect_left(self.compactions or (), seq)
        if compacted and self.compactions is not None:
            bound = bisect.bisect_right(self.committed, self.compactions[compacted - 1])
        stop = max(at - _PROMPT_LOOKBACK, bound)
        visited: list[int] = []
        found: str | None = None
        for index in range(at - 1, stop - 1, -1):
            if index in self._prompts:
                found = self._prompts[index]
                break
            visited.append(index)
            record = self.reader(self.committed[index])
            data = _mapping(None if record is None else record.get("data"))
            message = _mapping(data.get("message"))
            if (message.get("role") or message.get("$ls")) in ("user", "human"):
                found = snippet(message.get("content")) or None
                break
        else:
            if stop > bound:
                return None  # gave up early: nothing to remember for a longer search
        for index in visited:
            self._prompts[index] = found
        return found

    def _errors(self, failed: list[Bar], t0: int, final: datetime) -> list[dict[str, Any]]:
        self._fill_previews(failed)
        out = []
        for bar in failed:
            if bar.state == "error":
                out.append(
                    {
                        "span_id": f"{bar.span_id:016x}",
                        "id": bar.execution.id,
                        "attempt": bar.execution.attempt,
                        "name": bar.name,
                        "label": bar.label,
                        "error_type": bar.error_type,
                        "error_text": bar.error_text,
                        "start_us": epoch_us(bar.start) - t0,
                        "end_us": epoch_us(bar.end or final) - t0,
                    }
                )
        return out

    def counts(self) -> dict[str, int]:
        """Model calls, tool calls, errors and retries (each attempt counts)."""
        bars = self.bars.values()
        return {
            "executions": len(bars),
            "model_calls": sum(1 for b in bars if b.execution.kind == "model"),
            "tool_calls": sum(1 for b in bars if b.execution.kind == "tool"),
            "errors": sum(1 for b in bars if b.state == "error"),
            "retries": sum(1 for b in bars if b.execution.attempt > 1),
        }


def _subtree_sizes(rows: list[tuple[int, str, list[Bar]]]) -> list[int]:
    """For each depth-first row, how many rows below it belong to its subtree."""
    sizes = [0] * len(rows)
    stack: list[int] = []
    for i, (depth, _, _) in enumerate(rows):
        while stack and rows[stack[-1]][0] >= depth:
            top = stack.pop()
            sizes[top] = i - top - 1
        stack.append(i)
    for top in stack:
        sizes[top] = len(rows) - top - 1
    return sizes


def _ancestors(rows: list[tuple[int, str, list[Bar]]], index: int) -> frozenset[str]:
    """The execution IDs of the rows above ``index`` in its subtree path."""
    out = set()
    depth = rows[index][0]
    for i in range(index - 1, -1, -1):
        if depth == 0:
            break
        if rows[i][0] < depth:
            depth = rows[i][0]
            out.add(rows[i][1])
    return frozenset(out)


def _visible(
    rows: list[tuple[int, str, list[Bar]]], sizes: list[int], collapsed: frozenset[str]
) -> list[int]:
    """Indexes of the rows not hidden inside a collapsed row's subtree."""
    if not collapsed:
        return list(range(len(rows)))
    out = []
    i = 0
    while i < len(rows):
        out.append(i)
        i += 1 + sizes[i] if rows[i][1] in collapsed else 1
    return out


def _bar_json(bar: Bar, t0: int, final: datetime) -> dict[str, Any]:
    ex = bar.execution
    return {
        "id": ex.id,
        "kind": ex.kind,
        "attempt": ex.attempt,
        "parent_id": ex.parent_id,
        "span_id": f"{bar.span_id:016x}",
        "parent_span_id": f"{bar.parent_span_id:016x}",
        "name": bar.name,
        "label": bar.label,
        "start_us": epoch_us(bar.start) - t0,
        "end_us": epoch_us(bar.end or final) - t0,
        "start": iso(bar.start),
        "end": iso(bar.end),
        "state": bar.state,
        "error_type": bar.error_type,
        "retried": bar.retried,
        "seq_first": bar.seq_first,
        "seq_last": bar.seq_last,
        "seqs": list(bar.seqs),
        "model": bar.response_model or bar.model,
        "provider": bar.provider,
        "tool": bar.tool,
        "agent": bar.agent,
        "input_tokens": bar.input_tokens,
        "output_tokens": bar.output_tokens,
        "cost_usd": bar.cost.to_json() if ex.kind == "model" else None,
        "preview": bar.preview,
        "outcome": bar.outcome,
        "error_text": bar.error_text,
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}

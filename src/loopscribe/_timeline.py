"""The run timeline: every execution attempt of a run as a bar, folded from records.

One fold serves the web viewer, ``loopscribe report`` and ``loopscribe
stats``, and it reads the records the way :class:`~loopscribe.otel.SpanBridge`
does, so a bar is exactly a span:

* a bar starts at its attempt's first record and ends at its terminal record
  (``model_exec_end``, ``tool_exec_end``, ``turn_end``, ``agent_end``,
  ``context_transform_end``); its span ID is derived from the same
  coordinates, and its parent is the latest attempt of ``parent_id`` seen
  when it started (else the run);
* its outcome is ``error`` when the terminal record has ``error`` or
  ``is_error``, ``incomplete`` when ``run_close`` came first, ``open`` while
  nothing has ended it yet (the run is still being written, or was
  interrupted), else ``ok``;
* records after the terminal one (``retry_scheduled``, a late
  ``message_end``) still belong to the bar's records, not to its time range.

The fold never keeps a body: only labels (model, tool, agent names, token
counts, ``error.type``), sequence numbers, and each record's byte offset and
size, so a record can be read back alone with ``os.pread``.
:class:`SessionTimeline` advances from where it stopped as its file grows.
"""

from __future__ import annotations

import bisect
import os
import threading
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import orjson

from . import events as ev
from ._attempts import ENDED, LATE, AttemptFold, Key
from ._cost import ZERO, Cost, call_cost
from ._errors import FormatError
from ._fields import TokenUsage, node_name, plain, response_labels, span_name, text
from ._format import Scanner
from ._model import Execution, Record
from ._preview import error_text, preview, snippet
from ._reader import to_record
from ._runnames import run_names
from ._safeopen import open_session_file
from ._scope import AgentScopes
from .otel._ids import parse_traceparent, run_span_id, span_id, trace_id

__all__ = ["Bar", "BarState", "RunTimeline", "SessionTimeline", "load_timeline"]

BarState = Literal["ok", "error", "open", "incomplete"]

_BLOCK_BYTES = 1 << 16
MINIMAP_BUCKETS = 240
"""Time buckets of a run's minimap: attempts started, and failed attempts, per bucket."""
_ERRORS_LISTED = 500
"""Failed attempts a timeline lists by name; the minimap still counts every one."""
_PROMPT_LOOKBACK = 200
"""Committed messages read back at most for an imported call's prompt preview."""
_INPUT_TYPES = frozenset({ev.MODEL_REQUEST, ev.TOOL_EXEC_START, ev.TOOL_INVOKE_START})
_AGENT_TYPES = frozenset({ev.AGENT_START, ev.AGENT_END})
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


class SessionTimeline:
    """A session file's runs, bars and record offsets, advanced as the file grows.

    Build it with :meth:`refresh` (or :func:`load_timeline`); call
    :meth:`refresh` again to take in records appended since. A file that was
    replaced or shrank below what was read is folded anew.

    Attributes:
        path: The session file.
        session_id: From its ``session_start`` (empty until that is read).
        metadata: ``session_start`` metadata updated by ``session_update`` records.
        runs: By run ID, in the order they started.
        session_records: Seqs of records outside any run.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock = threading.RLock()
        """Held while the fold grows, and by a request that reads it (see ``Catalog``)."""
        self._facts: tuple[int, dict[str, Any]] | None = None
        self._reset(None)

    def _reset(self, st: os.stat_result | None) -> None:
        self.session_id = ""
        self.created: datetime | None = None
        self.updated: datetime | None = None
        self.metadata: dict[str, Any] = {}
        self.runs: dict[str, RunTimeline] = {}
        self.session_records: list[int] = []
        self._offsets = array("q")
        self._sizes = array("q")
        self.compaction_seqs = array("q")
        """Seqs of ``compaction`` records, ascending (where a context starts anew)."""
        self.scoped_commits: dict[str | None, array[int]] = {}
        """Per conversation scope (``None``: the top level; else a nested agent's
        execution id, see :class:`~loopscribe._scope.AgentScopes`): the seqs of its
        ``message_end`` records, ascending."""
        self.scoped_compactions: dict[str | None, array[int]] = {}
        """Per conversation scope: the seqs of its ``compaction`` records."""
        self.request_scopes: dict[int, str] = {}
        """``model_request`` seq → its nested agent's scope (absent: the top level)."""
        self._scopes = AgentScopes()
        self._scanner = Scanner(self.path)
        self._end = 0
        self._lines = 0
        self._order = 0
        self._stamp: tuple[int, int, int] | None = None
        self._inode = None if st is None else st.st_ino

    # -- reading ------------------------------------------------------------------

    @property
    def records(self) -> int:
        """Complete records read so far."""
        return len(self._offsets)

    @property
    def end_offset(self) -> int:
        """Where the last complete record read ends."""
        return self._end

    def locate(self, seq: int) -> tuple[int, int] | None:
        """``(offset, size)`` of record ``seq``, or ``None`` if it has not been read."""
        if 0 <= seq < len(self._offsets):
            return self._offsets[seq], self._sizes[seq]
        return None

    def read_record(self, seq: int) -> dict[str, Any] | None:
        """Record ``seq`` parsed from its line (one ``os.pread``), or ``None`` if unreadable."""
        where = self.locate(seq)
        if where is None:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                raw = os.pread(fd, where[1], where[0])
            finally:
                os.close(fd)
            obj = orjson.loads(raw)
        except (OSError, orjson.JSONDecodeError):
            return None
        return obj if isinstance(obj, dict) and obj.get("seq") == seq else None

    def refresh(self, st: os.stat_result | None = None) -> bool:
        """Read what was appended since the last call.

        Args:
            st: A fresh ``os.stat`` of the file, if the caller has one.

        Returns:
            Whether the file changed since the last call.

        Raises:
            CorruptRecordError: A complete line is damaged.
            UnsupportedVersionError: The file's format version is not supported.
            FormatError: The file is not a session file.
            OSError: The file cannot be read.
        """
        st = st or self.path.stat()
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return False
        if self._inode != st.st_ino or st.st_size < self._end:
            self._reset(st)  # replaced or cut below what was read: fold it anew
        self._advance(st)
        return True

    def _advance(self, st: os.stat_result) -> None:
        try:
            with open_session_file(self.path, _BLOCK_BYTES) as stream:
                stream.seek(self._end)
                for number, offset, raw, obj in self._scanner.lines(
                    stream, offset=self._end, first_line=self._lines + 1
                ):
                    record = to_record(
                        self._scanner, number, offset, raw, obj, None, self._scanner.ts
                    )
                    self._feed(record)
                    self._lines = number
                self._end = self._scanner.end_offset
        except BaseException:
            self._stamp = None  # fold anew next time rather than trust a half-read state
            self._reset(st)
            raise
        if not self.session_id:
            raise FormatError(f"{self.path}: not a session file (no session_start)", path=self.path)
        self._stamp = (st.st_ino, st.st_size, st.st_mtime_ns)

    def _feed(self, record: Record) -> None:
        self._offsets.append(record.offset)
        self._sizes.append(record.size)
        self.updated = record.ts
        kind = record.type
        if kind in (ev.MESSAGE_END, ev.COMPACTION, ev.MODEL_REQUEST):
            scope = self._scopes.scope(record.execution)
            if kind == ev.MODEL_REQUEST:
                if scope is not None:
                    self.request_scopes[record.seq] = scope
            else:
                index = self.scoped_commits if kind == ev.MESSAGE_END else self.scoped_compactions
                index.setdefault(scope, array("q")).append(record.seq)
                if kind == ev.COMPACTION:
                    self.compaction_seqs.append(record.seq)
        elif record.execution is not None:
            self._scopes.scope(record.execution)
        if record.type == ev.SESSION_START:
            self.session_id, self.created = record.session_id, record.ts
            self.metadata.update(_mapping(record.data.get("metadata")))
        elif record.type == ev.SESSION_UPDATE:
            self.metadata.update(_mapping(record.data.get("fields")))
        run_id = record.run_id
        if run_id is None:
            self.session_records.append(record.seq)
            return
        run = self.runs.get(run_id)
        if record.type == ev.RUN_START or run is None:
            run = self.runs[run_id] = self._new_run(record)
        run.seq_last = record.seq
        run.last_ts = max(run.last_ts, record.ts)
        execution = record.execution
        if record.type == ev.MESSAGE_END:
            run.commits = True
            run.committed.append(record.seq)
        if execution is None:
            run.records.append(record.seq)
            if record.type == ev.RUN_CLOSE:
                self._close_run(run, record)
            return
        fold = run.fold
        if fold is None:
            fold = run.fold = self._fold(run)
        bar, step = fold.feed(record, execution)
        if record.type in _AGENT_TYPES and execution.parent_id is None:
            run.agent, run.error_type = fold.agent, fold.error_type
        if bar is None or step == LATE:
            # A late record (retry_scheduled, message_end): listed, not timed.
            late = run.bars.get((execution.id, execution.attempt))
            if late is not None:
                late.seqs.append(record.seq)
                if record.type == ev.MESSAGE_END:
                    late.committed = True
            return
        bar.seqs.append(record.seq)
        if record.type == ev.MESSAGE_END:
            bar.committed = True
        bar.absorb(record)
        if record.type in _INPUT_TYPES:
            if bar.input_seq is None:
                bar.input_seq = record.seq
        elif step == ENDED:  # its terminal record
            bar.end = record.ts
            bar.end_seq = record.seq
            bar.state = "error" if bar.error_type else "ok"

    def _new_run(self, record: Record) -> RunTimeline:
        session_id, run_id = record.session_id, record.run_id or ""
        host = None
        if record.type == ev.RUN_START:
            host = parse_traceparent(record.data.get("traceparent"))
        tid = trace_id(session_id, run_id) if host is None else host.trace_id
        return RunTimeline(
            reader=self.read_record,
            compactions=self.compaction_seqs,
            session_id=session_id,
            run_id=run_id,
            trace_id=tid,
            span_id=run_span_id(session_id, run_id),
            host_span_id=None if host is None else host.span_id,
            start=record.ts,
            seq_first=record.seq,
            seq_last=record.seq,
            last_ts=record.ts,
        )

    def _fold(self, run: RunTimeline) -> AttemptFold[Bar]:
        def start(record: Record, execution: Execution, parent: Key | None) -> Bar:
            return self._new_bar(run, record, execution, parent)

        return AttemptFold(start)

    def _new_bar(
        self, run: RunTimeline, record: Record, execution: Execution, parent: Key | None
    ) -> Bar:
        sid = span_id(run.session_id, run.run_id, execution.id, execution.attempt)
        # A parent not seen (yet) is the run: a bar's row is drawn when it starts.
        psid = run.span_id if parent is None else span_id(run.session_id, run.run_id, *parent)
        bar = Bar(execution, sid, psid, self._order, record.ts, record.seq, record.seq)
        self._order += 1
        for earlier in range(1, execution.attempt):
            previous = run.bars.get((execution.id, earlier))
            if previous is not None:
                previous.retried = True
        run.bars[bar.key] = bar
        run.by_span[sid] = bar.key
        return bar

    @staticmethod
    def _close_run(run: RunTimeline, record: Record) -> None:
        run.end = record.ts
        for bar in [] if run.fold is None else run.fold.close(record.seq):
            bar.state = "incomplete"
            bar.end = record.ts

    # -- views ---------------------------------------------------------------------

    @property
    def title(self) -> str | None:
        """The session's title, if it has one."""
        return text(self.metadata.get("title"))

    def facts(self) -> dict[str, Any]:
        """What a session list shows beside the summary: tool names, models, errors, calls.

        Folded from the bars (no body is read) and cached until the file grows.
        """
        if self._facts is not None and self._facts[0] == self.records:
            return self._facts[1]
        if not self.lock.acquire(blocking=False):
            # Another request is reading the file further: what was seen last will do.
            return self._facts[1] if self._facts is not None else {}
        try:
            return self._fold_facts()
        finally:
            self.lock.release()

    def _fold_facts(self) -> dict[str, Any]:
        tools: dict[str, None] = {}
        models: dict[str, None] = {}
        errors = model_calls = tool_calls = 0
        for run in self.runs.values():
            for bar in run.bars.values():
                kind = bar.execution.kind
                if kind == "tool":
                    tool_calls += 1
                    if bar.tool and len(tools) < 100:
                        tools[bar.tool] = None
                elif kind == "model":
                    model_calls += 1
                    model = bar.response_model or bar.model
                    if model and len(models) < 20:
                        models[model] = None
                if bar.state == "error":
                    errors += 1
            if run.error_type:
                errors += 1
        firsts = [run.first_ts for run in self.runs.values()]
        finals = [run.final_ts for run in self.runs.values()]
        facts = {
            "duration_us": (
                max(0, epoch_us(max(finals)) - epoch_us(min(firsts))) if firsts else None
            ),
            "tools": list(tools),
            "models": list(models),
            "errors": errors,
            "model_calls": model_calls,
            "tool_calls": tool_calls,
        }
        self._facts = (self.records, facts)
        return facts

    def iter_runs(self) -> Iterator[RunTimeline]:
        """The runs, in the order they started."""
        return iter(self.runs.values())

    def find_span(self, trace: int, span: int) -> tuple[RunTimeline, Bar | None] | None:
        """The run (and bar, for an execution span) behind a trace and span ID."""
        for run in self.runs.values():
            if run.trace_id != trace:
                continue
            if run.span_id == span:
                return run, None
            bar = run.bar_of_span(span)
            if bar is not None:
                return run, bar
        return None

    def run_of_seq(self, seq: int) -> tuple[RunTimeline | None, Bar | None]:
        """The run and bar a record belongs to (linear in the run's bars; for one record)."""
        for run in self.runs.values():
            if not run.seq_first <= seq <= run.seq_last:
                continue
            if seq in run.records:
                return run, None
            for bar in run.bars.values():
                if seq in bar.seqs:
                    return run, bar
        return None, None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def load_timeline(path: str | os.PathLike[str]) -> SessionTimeline:
    """Fold a session file into its timeline.

    Raises:
        CorruptRecordError: A complete line is damaged.
        UnsupportedVersionError: The file's format version is not supported.
        FormatError: The file is not a session file.
        OSError: The file cannot be read.
    """
    timeline = SessionTimeline(path)
    timeline.refresh()
    return timeline

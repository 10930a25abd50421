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

A bar is a :class:`~loopscribe._bars.Bar`; a run's bars, rows and page JSON are a
:class:`~loopscribe._run_timeline.RunTimeline`; this module reads the file into them.
"""

from __future__ import annotations

import os
import threading
from array import array
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from . import events as ev
from ._attempts import ENDED, LATE, AttemptFold, Key
from ._bars import Bar, BarState, epoch_us, iso
from ._errors import FormatError
from ._fields import text
from ._format import Scanner
from ._model import Execution, Record
from ._reader import to_record
from ._run_timeline import RunTimeline, _mapping
from ._safeopen import open_session_file
from ._scope import AgentScopes
from .otel._ids import parse_traceparent, run_span_id, span_id, trace_id

__all__ = [
    "Bar",
    "BarState",
    "RunTimeline",
    "SessionTimeline",
    "epoch_us",
    "iso",
    "load_timeline",
]


_BLOCK_BYTES = 1 << 16
_INPUT_TYPES = frozenset({ev.MODEL_REQUEST, ev.TOOL_EXEC_START, ev.TOOL_INVOKE_START})
_AGENT_TYPES = frozenset({ev.AGENT_START, ev.AGENT_END})


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

    def __init__(self, path: str | os.PathLike[str], *, index: bool = True) -> None:
        self.path = Path(path)
        self._index = index
        """Keep what a page reads back by seq: each record's offset and size, and each
        execution's conversation scope. ``False`` (``stats``) keeps counts only, so memory
        is bounded by the open runs, not by the file."""
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
        self._count = 0
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
        return self._count

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

    def _index_record(self, record: Record) -> None:
        """Keep where ``record`` is, and the conversation scope of its execution."""
        self._offsets.append(record.offset)
        self._sizes.append(record.size)
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

    def _feed(self, record: Record) -> None:
        self._count += 1
        self.updated = record.ts
        if self._index:
            self._index_record(record)
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

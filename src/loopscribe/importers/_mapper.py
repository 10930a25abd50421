"""A source format's mapping: the state machine fed one parsed line at a time."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

from .. import events as ev
from .._model import Event, Execution
from ._destination import Destination
from ._lines import parse_ts
from ._report import ImportReport
from ._titles import title_text

SOURCE_EVENT = "source_event"
"""Record type of a source line the importer keeps as it is (an unknown type)."""


Source = dict[str, Any]
"""A record's reference to its source line: ``{"file": ..., "line": ...}``."""


class Mapper:
    """A source format's mapping: a state machine fed one parsed line at a time.

    It emits operations to :attr:`dest` and counts what it did in
    :attr:`report`. :class:`Importer` drives it from a transcript file and a
    cursor; a live host (``loopscribe.adapters.claude_agent_sdk``) drives the
    same mapping with the lines it receives, so both write the same records.
    """

    name: ClassVar[str] = ""
    anthropic_usage: ClassVar[bool] = False

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.last_ts: datetime | None = None
        """The latest source timestamp read: for lines that have none."""
        self.record_ts: datetime | None = None
        """The latest timestamp recorded: where a run without a closing line closes."""
        self.meta: dict[str, Any] = {}
        self.dest: Destination
        self._prefix = hashlib.sha256()
        """SHA-256 of the transcript up to where it was read."""
        self.title_from: str | None = None
        """What the session's title was taken from: ``summary``, ``user`` or nothing yet."""
        self._looked_ahead = False

    # -- for subclasses ------------------------------------------------------------

    def handle(self, obj: Any, line: int, raw: bytes, source: Source) -> None:
        """Map one parsed source line (``obj`` may be any JSON value)."""
        raise NotImplementedError

    def finish(self) -> None:
        """The transcript is finished: end what is open and close the last run."""
        raise NotImplementedError

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore the pairing state saved by :meth:`dump_state`."""
        raise NotImplementedError

    def dump_state(self) -> dict[str, Any]:
        """The pairing state to keep in the cursor (JSON values only)."""
        raise NotImplementedError

    def pending_calls(self) -> int:
        """Tool calls still waiting for a result."""
        raise NotImplementedError

    # -- helpers for subclasses ----------------------------------------------------

    def emit(
        self,
        kind: str,
        execution: Execution | None,
        data: dict[str, Any],
        timestamp: datetime | None,
    ) -> None:
        """Record an event, opening a run first when none is open."""
        write = self.dest.write
        if write is not None:
            write(kind, execution, data, timestamp)
            self.report.records += 1
        else:
            if not self.dest.run_open:
                self.begin_run(timestamp)
            self.dest.record(Event(kind, execution, data, timestamp))
        if (
            timestamp is not None
            and timestamp is not self.record_ts
            and (self.record_ts is None or timestamp > self.record_ts)
        ):
            self.record_ts = timestamp

    def begin_run(self, timestamp: datetime | None) -> None:
        """Start a run (a turn of the agent) at ``timestamp``."""
        self.dest.begin_run(timestamp)
        if timestamp is not None and (self.record_ts is None or timestamp > self.record_ts):
            self.record_ts = timestamp

    def source_event(
        self,
        kind: str,
        obj: Any,
        source: Source,
        timestamp: datetime | None,
        execution: Execution | None = None,
    ) -> None:
        """Keep a source line the importer does not map, and count its type."""
        self.report.unknown[kind] += 1
        self.emit(
            SOURCE_EVENT,
            execution,
            {"agent": self.name, "type": kind, "line": obj, "source": source},
            timestamp,
        )

    def offer_title(
        self, text: Any, source: Source, timestamp: datetime | None, *, summary: bool
    ) -> None:
        """Title the session: the agent's own summary wins over the first user message.

        The title goes into a ``session_update`` record, as ``Workspace.update`` writes it.
        """
        if self.title_from is not None and not summary:
            return
        title = title_text(self.dest.scrubbed(text))
        if title is None:
            return
        self.dest.annotate(
            ev.SESSION_UPDATE, {"fields": {"title": title}, "source": source}, timestamp
        )
        self.title_from = "summary" if summary else "user"

    def _state(self) -> dict[str, Any]:
        state = self.dump_state()
        if self.title_from is not None:
            state["title_from"] = self.title_from
        return state

    def line_ts(self, value: Any) -> datetime | None:
        """The timestamp of a line: its own, else the last one seen (never wall-clock time).

        Lines before the first one with a timestamp (a Claude Code ``summary``
        line heads a resumed session) take that first one's, when the source
        has it (:meth:`first_ts`).
        """
        ts = parse_ts(value)
        if ts is not None:
            self.last_ts = ts
            return ts
        if self.last_ts is None and not self._looked_ahead:
            self._looked_ahead = True
            self.last_ts = self.first_ts()
        return self.last_ts

    def first_ts(self) -> datetime | None:
        """The first timestamp the source holds, if it can tell (a file can; a stream cannot)."""
        return None

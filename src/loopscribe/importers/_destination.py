"""The destination session of an import: one record per operation, matched after a crash."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from .. import events as ev
from .._errors import LoopscribeError
from .._locks import fcntl
from .._model import Event, Execution, Record
from .._reader import read
from .._redact import LineRedactor, Redactor
from .._session import Observer, Run, Session
from ._cursor import Cursor, ImportStateError, cursor_path
from ._report import ImportReport

logger = logging.getLogger("loopscribe.importers")

LEFTOVER_SUFFIX = ".leftover"
"""What a destination without a cursor is renamed to before importing again."""
_HEAD_BYTES = 1 << 20
"""Enough of a session file to hold its ``session_start`` line."""

Write = Callable[[str, Execution | None, Mapping[str, Any], datetime | None], None]
"""Writes one record into the open run: kind, execution, data, source time."""


def import_redactor(redact: LineRedactor | bool | None) -> LineRedactor | None:
    """What an import's ``redact=`` means: ``True`` is :meth:`Redactor.default`.

    Imports scrub by default: transcripts are full of pasted keys, and an
    import is offline, so the token patterns' cost does not matter there.
    ``False`` or ``None`` turns redaction off; a callable is used as it is.
    """
    if redact is True:
        return Redactor.default()
    if redact is False or redact is None:
        return None
    return redact


class Destination:
    """The destination session file, opened on the first operation.

    Every operation writes exactly one record. After an interrupted import
    (records written, cursor not saved) the first operations are checked
    against the records already there instead of being written again.

    Run lifecycle records carry source timestamps
    (``Session.begin_run(timestamp=)``, ``Run.close(timestamp=)``,
    ``Session.annotate(timestamp=)``), and a run left open by one import is
    continued by the next (``Run.detach()``, ``Session.resume_run(gap=False)``).

    An import writes in blocks (a buffered Session, ``Session.create(buffered=True)``),
    since it can be done again from its cursor. A
    ``live`` writer (the Claude Agent SDK session store) writes each record at
    once, its ``observers`` see the records as they are written, and when it
    reopens a file it matches the records there as the normal way to continue
    (no warning of an interrupted import).
    """

    def __init__(
        self,
        path: Path,
        cursor: Cursor | None,
        metadata: Callable[[], Mapping[str, Any]],
        report: ImportReport,
        *,
        observers: Iterable[Observer] = (),
        live: bool = False,
        redact: LineRedactor | None = None,
    ) -> None:
        self.path = path
        self._cursor = cursor
        self._redact = redact
        self._observers = tuple(observers)
        self._live = live
        self._metadata = metadata
        self._report = report
        self._session: Session | None = None
        self._run_id: str | None = None if cursor is None else cursor.run_id
        self._run: Run | None = None
        self._replay: Iterator[Record] | None = None
        self._skip = 0
        self.write: Write | None = None
        """Writes a record into the open run while records are written (not matched after
        a crash): the fast path. An import's is :meth:`BulkWriter.write`, which builds no
        Record; a live writer's records each through :meth:`Run.record`."""

    def scrubbed(self, value: Any) -> Any:
        """``value`` (JSON) as the session's redaction leaves it in a record.

        For what is derived from the transcript but not written as it is: a
        title cut from a prompt (cut first, a secret would be cut in half and
        no longer found), the pairing state kept in the cursor.
        """
        if self._redact is None:
            return value
        record = {"type": "scrub", "data": value}
        try:
            line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:  # a lone surrogate, an integer past 64 bits
            try:
                line = json.dumps(record).encode() + b"\n"
            except (TypeError, ValueError):
                return value  # not JSON: the codec keeps none of it either
        scrubbed = self._redact(line)
        return value if scrubbed == line else json.loads(scrubbed)["data"]

    @property
    def opened(self) -> bool:
        """Whether any operation reached the destination."""
        return self._session is not None

    @property
    def run_open(self) -> bool:
        """Whether records currently go into an open run."""
        return self._run_id is not None

    @property
    def run_id(self) -> str | None:
        """The open run, if any."""
        return self._run_id

    def ensure_open(self) -> Session:
        """Open (or create) the destination session now."""
        if self._session is not None:
            return self._session
        cursor = self._cursor
        if cursor is None:
            if self.path.exists():
                self._remove_leftover()
            session = Session.create(
                self.path,
                metadata=self._metadata(),
                observers=self._observers,
                redact=self._redact,
                buffered=not self._live,
            )
        else:
            if not self.path.exists():
                raise ImportStateError(
                    f"{self.path}: missing, but its import cursor exists; delete "
                    f"{cursor_path(self.path)} to import the transcript again"
                )
            session = Session.open(
                self.path,
                observers=self._observers,
                redact=self._redact,
                buffered=not self._live,
            )
            if session.id != cursor.session_id or session.next_seq < cursor.dest_seq:
                session.close()
                raise ImportStateError(
                    f"{self.path}: does not match its import cursor (session "
                    f"{session.id}, {session.next_seq} records; the cursor expects session "
                    f"{cursor.session_id} with at least {cursor.dest_seq}); delete the file "
                    "and its cursor to import the transcript again"
                )
            if session.next_seq > cursor.dest_seq:
                # An earlier import wrote these records but died before saving the cursor.
                self._skip = session.next_seq - cursor.dest_seq
                self._replay = (
                    r for r in read(self.path, decode=False) if r.seq >= cursor.dest_seq
                )
                if not self._live:
                    logger.warning(
                        "%s: %d records after the cursor (an interrupted import); matching "
                        "them against the transcript instead of writing them again",
                        self.path,
                        self._skip,
                    )
        self._session = session
        self._update_writing()
        return session

    def _remove_leftover(self) -> None:
        """Remove what a failed first import of this transcript left, or refuse.

        A first import that died (crash, SIGKILL, full disk, bad data) before
        saving its cursor leaves a session without one. When no writer holds
        it and its ``session_start`` names this transcript, it is that
        leftover: it is moved aside (``*.jsonl.leftover``, which no reader
        lists) and the import starts again. A file another
        process is writing is never touched, and never to be deleted.
        """
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ImportStateError(
                    f"{self.path}: another import is writing this session right now (it holds "
                    "the writer lock); let it finish, then run the import again"
                ) from None
            head = os.pread(fd, _HEAD_BYTES, 0)
        finally:
            os.close(fd)
        first, newline, _ = head.partition(b"\n")
        ours = not newline  # not even a complete first line: a first import cut short
        if newline:
            try:
                start = orjson.loads(first)
                meta = start["data"]["metadata"]
                ours = meta["import"]["file"] == self._metadata()["import"]["file"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                ours = False
        if not ours:
            raise ImportStateError(
                f"{self.path}: exists, but has no import cursor beside it "
                f"({cursor_path(self.path).name}) and was not started by an import of this "
                "transcript; move it out of the import folder, then import again"
            )
        aside = self.path.with_name(self.path.name + LEFTOVER_SUFFIX)
        logger.warning(
            "%s: has no cursor (a first import that did not finish, or a lost cursor); "
            "moved to %s, importing the transcript again",
            self.path,
            aside.name,
        )
        os.replace(self.path, aside)

    def _replayed(self, kind: str, execution: Execution | None) -> Record | None:
        """The existing record an operation corresponds to, while recovering."""
        if not self._skip:
            return None
        assert self._replay is not None
        record = next(self._replay, None)
        same_execution = execution is None or (
            record is not None
            and record.execution is not None
            and record.execution.id == execution.id
        )
        if record is None or record.type != kind or not same_execution:
            found = "nothing" if record is None else f"seq {record.seq} ({record.type})"
            raise ImportStateError(
                f"{self.path}: the records left by an interrupted import do not match the "
                f"transcript (expected {kind}, found {found}); delete the file and its cursor "
                "to import the transcript again"
            )
        self._skip -= 1
        return record

    @property
    def unmatched(self) -> int:
        """Records of an interrupted import not matched yet (the cursor must not move)."""
        return self._skip

    def _update_writing(self) -> None:
        """Once nothing is left to match, continue the open run for real."""
        if self._skip or self._session is None:
            self.write = None
            return
        if self._run_id is not None and self._run is None:
            # The transcript holds every event: continuing is no gap (no run_resume).
            self._run = self._session.resume_run(self._run_id, gap=False)
        run = self._run
        if run is None:
            self.write = None
        elif self._live:
            self.write = _recorder(run)
        else:
            self.write = run.bulk().write

    def record(self, event: Event) -> None:
        """Record a host event in the open run."""
        self.ensure_open()
        if self._run_id is None:
            raise AssertionError("importer bug: a record outside a run")
        if self._replayed(event.type, event.execution) is not None:
            self._update_writing()
            return
        assert self._run is not None
        self._run.record(event)
        self._report.records += 1

    def begin_run(self, timestamp: datetime | None) -> None:
        """Start a run whose ``run_start`` carries the source timestamp."""
        session = self.ensure_open()
        if self._run_id is not None:
            raise AssertionError("importer bug: a run is already open")
        existing = self._replayed(ev.RUN_START, None)
        if existing is not None:
            assert existing.run_id is not None
            self._run_id = existing.run_id
        else:
            self._run = session.begin_run(timestamp=timestamp)
            self._run_id = self._run.id
            self._report.records += 1
        self._update_writing()

    def close_run(self, timestamp: datetime | None) -> None:
        """Write ``run_close`` with the source timestamp."""
        self.ensure_open()
        if self._run_id is None:
            raise AssertionError("importer bug: no run to close")
        if self._replayed(ev.RUN_CLOSE, None) is None:
            assert self._run is not None
            # The transcript can be imported again: one fsync before the cursor
            # is saved covers every turn of this import.
            self._run.close(timestamp=timestamp, sync=False)
            self._report.records += 1
        self._run = None
        self._run_id = None
        self._update_writing()

    def annotate(self, kind: str, data: Mapping[str, Any], timestamp: datetime | None) -> None:
        """Append a session-level fact (``compaction``) with the source timestamp."""
        session = self.ensure_open()
        if self._replayed(kind, None) is None:
            session.annotate(kind, data, timestamp=timestamp)
            self._report.records += 1
        self._update_writing()

    def close(self) -> tuple[int, int]:
        """Leave an open run open, fsync and close; returns ``(next_seq, size)``."""
        session = self._session
        if session is None:
            raise AssertionError("importer bug: closing an unopened destination")
        if self._skip:
            logger.warning(
                "%s: %d records of an interrupted import are not matched yet; the cursor "
                "stays where it was, and the next import matches them again",
                self.path,
                self._skip,
            )
        if self._run is not None:
            self._run.detach()
        session.close()
        return session.next_seq, session.size

    def abort(self) -> None:
        """Close without saving anything more (after an error)."""
        session = self._session
        if session is not None and not session.closed:
            try:
                session.close()
            except LoopscribeError as exc:
                if exc is not session.error:  # the sticky error is the one being raised
                    logger.exception("%s: closing after a failed import", self.path)

    @property
    def session(self) -> Session | None:
        """The open Session, once opened."""
        return self._session


def _recorder(run: Run) -> Write:
    """A live writer's :data:`Write`: each record through :meth:`Run.record`, observed."""

    def write(
        kind: str, execution: Execution | None, data: Mapping[str, Any], timestamp: datetime | None
    ) -> None:
        run.record(Event(kind, execution, data, timestamp))

    return write

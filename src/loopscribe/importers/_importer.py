"""The import of one transcript file: read from the cursor, map, write, save the cursor."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from .._errors import LoopscribeError
from .._files import make_private_dir
from .._redact import LineRedactor
from ._cursor import Cursor, ImportStateError, cursor_path
from ._defaults import DEFAULT_SETTLE_SECONDS
from ._destination import Destination, import_redactor
from ._lines import (
    MAX_LINE_DEPTH,
    _digest_prefix,
    format_ts,
    head_digest,
    parse_ts,
    read_lines,
    too_deep,
)
from ._mapper import Mapper
from ._report import ImportReport

logger = logging.getLogger("loopscribe.importers")

_LOOK_AHEAD_BYTES = 16 << 20
"""How far :meth:`Importer.first_ts` reads for a first timestamp before giving up."""
_PROGRESS_STEP = 1 << 20


class Importer(Mapper):
    """Reads one transcript from its cursor and feeds the lines to :meth:`handle`.

    Subclasses implement the mapping; this class owns reading, the cursor,
    the destination, the decision that a transcript is finished, and stopping.
    """

    def __init__(
        self,
        source: Path,
        destination: Path,
        *,
        finished: bool | None = None,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        stop: threading.Event | None = None,
        on_progress: Callable[[int], None] | None = None,
        redact: LineRedactor | bool | None = True,
    ) -> None:
        self.source = source.absolute()
        self.file = str(self.source)
        self.destination = destination.absolute()
        self.cursor_path = cursor_path(self.destination)
        self._finished = finished
        self._settle_seconds = settle_seconds
        self._stop = stop
        self._on_progress = on_progress
        self._redact = import_redactor(redact)
        super().__init__(ImportReport(self.name, self.source, self.destination))

    def metadata(self) -> dict[str, Any]:
        """``session_start`` metadata of a new destination."""
        return {"source": self.name, "import": {"file": self.file, **self.meta}}

    def first_ts(self) -> datetime | None:
        """The ``timestamp`` of the transcript's first line that has one (its complete lines)."""
        read = 0
        for _number, _end, raw in read_lines(self.source, 0, 0):
            read += len(raw)
            if b'"timestamp"' in raw:
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                ts = parse_ts(obj.get("timestamp")) if isinstance(obj, dict) else None
                if ts is not None:
                    return ts
            if read > _LOOK_AHEAD_BYTES:
                break
        return None

    # -- the run -------------------------------------------------------------------

    def run(self) -> ImportReport:
        """Import what is new in the transcript.

        Raises:
            ImportStateError: The source, destination and cursor disagree.
            OSError: A file cannot be read or written.
        """
        cursor = Cursor.load(self.cursor_path)
        size = self.source.stat().st_size
        head = head_digest(self.source) if size else None
        if cursor is not None:
            if size >= cursor.offset:
                self._prefix = _digest_prefix(self.source, cursor.offset)
            self._check_source(cursor, size, head)
            self.load_state(cursor.state)
            title_from = cursor.state.get("title_from")
            self.title_from = title_from if isinstance(title_from, str) else None
            self.last_ts = parse_ts(cursor.last_ts)
            self.record_ts = parse_ts(cursor.record_ts)
            self.report.session_id = cursor.session_id
            self.report.finished = cursor.finished
        offset = 0 if cursor is None else cursor.offset
        line = 0 if cursor is None else cursor.line
        self.dest = Destination(
            self.destination, cursor, self.metadata, self.report, redact=self._redact
        )
        try:
            offset, line, new_lines = self._read(offset, line)
            finished = self._decide_finished(size)
            reopened = cursor is not None and not cursor.finished
            if finished and not self.report.stopped and (new_lines or reopened):
                self.finish()
                self.report.finished = True
            elif new_lines:
                self.report.finished = False
            if not self.dest.opened and cursor is None and new_lines:
                # Every line mapped to nothing: still create the session, so the
                # cursor remembers the transcript.
                self.dest.ensure_open()
            if not self.dest.opened:
                self._save_if_moved(cursor, offset, line, head)
                return self._done()
            dest_seq, dest_size = self.dest.close()
        except BaseException:
            self.dest.abort()
            raise
        session = self.dest.session
        assert session is not None
        self.report.session_id = session.id
        if self.dest.unmatched:
            # The transcript does not (yet) explain every record there; keep the
            # old cursor so the next import starts matching from the same place.
            return self._done()
        new = Cursor(
            importer=self.name,
            source=self.file,
            head=head if head is not None else (cursor.head if cursor else None),
            offset=offset,
            line=line,
            session_id=session.id,
            dest_seq=dest_seq,
            dest_size=dest_size,
            run_id=self.dest.run_id,
            finished=self.report.finished,
            last_ts=format_ts(self.last_ts),
            record_ts=format_ts(self.record_ts),
            state=self._saved_state(),
            prefix=self._prefix.hexdigest(),
        )
        new.save(self.cursor_path, self.destination)
        return self._done()

    def _done(self) -> ImportReport:
        self.report.pending_calls = self.pending_calls()
        return self.report

    def _save_if_moved(
        self, cursor: Cursor | None, offset: int, line: int, head: str | None
    ) -> None:
        """Nothing was written: advance the cursor only if skipped lines moved it."""
        if cursor is None or (cursor.offset == offset and cursor.finished == self.report.finished):
            return
        cursor.offset, cursor.line = offset, line
        cursor.finished = self.report.finished
        cursor.last_ts = format_ts(self.last_ts)
        cursor.record_ts = format_ts(self.record_ts)
        cursor.head = head or cursor.head
        cursor.state = self._saved_state()
        cursor.prefix = self._prefix.hexdigest()
        cursor.save(self.cursor_path)

    def _saved_state(self) -> dict[str, Any]:
        """The pairing state for the cursor, scrubbed as the session's records are.

        It can hold what the transcript said (Codex's turn context, a
        subagent's name); the cursor is a file beside the session, so no
        secret may reach it either.
        """
        state = self.dest.scrubbed(self._state())
        return state if isinstance(state, dict) else {}

    def _check_source(self, cursor: Cursor, size: int, head: str | None) -> None:
        fix = f"delete {self.destination} and {self.cursor_path} to import the transcript again"
        if cursor.importer != self.name:
            raise ImportStateError(
                f"{self.cursor_path}: written by the {cursor.importer} importer, not {self.name}; "
                f"import into another --out folder, or {fix}"
            )
        if size < cursor.offset:
            raise ImportStateError(
                f"{self.source}: is {size} bytes, shorter than the {cursor.offset} bytes "
                f"imported before (line {cursor.line}); the transcript was rewritten: {fix}"
            )
        if cursor.head is not None and head != cursor.head:
            raise ImportStateError(
                f"{self.source}:1: the first line differs from the transcript imported into "
                f"{self.destination}; it was replaced: {fix}"
            )
        if cursor.prefix is not None and self._prefix.hexdigest() != cursor.prefix:
            raise ImportStateError(
                f"{self.source}:{cursor.line}: the first {cursor.offset} bytes (lines 1 to "
                f"{cursor.line}) differ from those imported into {self.destination}; the "
                f"transcript was rewritten: {fix}"
            )

    def _decide_finished(self, size: int) -> bool:
        """Is the transcript's last turn over? By its own clock, not the file's mtime.

        The last timestamp the transcript holds older than the settle time
        closes the turn: a copy or a clone refreshes the mtime, never the
        content. A file left untouched for that long is finished too.
        """
        if self._finished is not None:
            return self._finished
        if size == 0:
            return False
        now = time.time()
        if now - self.source.stat().st_mtime >= self._settle_seconds:
            return True
        last = self.last_ts
        return last is not None and now - last.timestamp() >= self._settle_seconds

    def _read(self, offset: int, line: int) -> tuple[int, int, bool]:
        """Feed every new complete line to :meth:`handle`; returns the new position."""
        report = self.report
        file = self.file
        loads = orjson.loads
        skip = self.skip_line
        skipped = report.skipped
        progress = self._on_progress
        stop = self._stop
        start = offset
        next_progress = offset + _PROGRESS_STEP
        count = 0
        prefix = self._prefix.update
        for number, end, raw in read_lines(self.source, offset, line):
            if stop is not None and stop.is_set():
                report.stopped = True
                break
            count += 1
            offset, line = end, number
            prefix(raw)
            label = skip(raw)
            if label is not None:
                skipped[label] += 1
                continue
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError as exc:
                self.invalid_line(number, raw, exc)
            else:
                # A "$ls" key needs nothing here: the codec escapes it, and it reads back equal.
                try:
                    if too_deep(raw, obj):
                        raise ValueError(f"nested deeper than {MAX_LINE_DEPTH} levels")
                    self.handle(obj, number, raw, {"file": file, "line": number})
                except (LoopscribeError, OSError):
                    raise  # the destination's failures, not the line's
                except Exception as exc:
                    self.bad_line(self.source, number, raw, exc)
            if progress is not None and end >= next_progress:
                progress(end - start)
                next_progress = end + _PROGRESS_STEP
        report.lines += count
        report.bytes += offset - start
        if progress is not None and count:
            progress(offset - start)
        return offset, line, count > 0

    def skip_line(self, raw: bytes) -> str | None:
        """A label for a line that is skipped without parsing it, or ``None`` to parse it.

        Only for line types that are never recorded and whose type can be
        told from the raw bytes with certainty (see :func:`top_level_type`).
        """
        return None

    def bad_line(self, path: Path, number: int, raw: bytes, exc: Exception) -> None:
        """A JSON line the mapping could not take (a ``type`` that is a list, ...).

        It is kept as an ``invalid_line`` source event, the first one is the
        report's :attr:`~ImportReport.error` (the import exits non-zero), and
        the import goes on with the next line.
        """
        self.report.bad_lines += 1
        detail = f"{type(exc).__name__}: {exc}"[:200]
        if self.report.error is None:
            self.report.error = (
                f"{path}:{number}: this line could not be imported ({detail}); it is kept as "
                "an invalid_line source event. The transcript is damaged or of an unknown "
                f"{self.name} version"
            )
        logger.warning("%s:%d: line not imported (%s)", path, number, detail)
        self.source_event(
            "invalid_line",
            raw.decode("utf-8", "replace").rstrip("\n"),
            {"file": str(path), "line": number},
            self.last_ts,
        )

    def invalid_line(self, number: int, raw: bytes, exc: Exception) -> None:
        """Keep a complete line that is not JSON as a source event, and warn."""
        logger.warning(
            "%s:%d: not valid JSON (%s); kept as a source_event record. The transcript "
            "was damaged or is not a %s transcript",
            self.source,
            number,
            exc,
            self.name,
        )
        self.report.invalid_lines += 1
        self.source_event(
            "invalid_line",
            raw.decode("utf-8", "replace").rstrip("\n"),
            {"file": self.file, "line": number},
            self.last_ts,
        )


def result_of(
    importer: type[Importer],
    source: Path,
    out_dir: Path,
    name: str,
    **options: Any,
) -> ImportReport:
    """Import ``source`` into ``out_dir/<name>.jsonl`` with ``importer``."""
    make_private_dir(out_dir)
    return importer(source, out_dir / f"{name}.jsonl", **options).run()

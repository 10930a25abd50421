"""Out-of-process export of a session file, resumable without sending a span twice.

The file is replayed from its start through a
:class:`~loopscribe.otel.SpanBridge` (spans need their run's and parents'
records), and spans are exported synchronously in batches. Each span is kept
with the seq of the record whose replay emitted it (for loopscribe's own spans,
``loopscribe.seq.last``; a host span the intake recorded is emitted by its
``host_span`` record), so a cursor holding "every span emitted by a record
before seq N was exported" is enough to resume: after a restart, spans emitted
before N are skipped. The cursor advances only after the exporter reported
success, and is replaced atomically, so a crash can at worst resend the last
batch, never lose one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ._errors import FormatError
from ._files import replace_file
from ._model import Record
from ._reader import read
from ._safeopen import check_regular
from .live import follow

logger = logging.getLogger("loopscribe")

BATCH_SPANS = 512
"""Spans per export call."""
FLUSH_INTERVAL_S = 1.0
"""While following, the longest a finished span waits before it is exported."""
MAX_BACKLOG_SPANS = 100_000
"""Spans kept for retry while the collector is down; older ones are dropped (and counted)."""
_WAIT_SLICE_S = 0.05
"""How often a waiting export looks at its deadline and the stop flag."""


def cursor_path(session_path: Path) -> Path:
    """Where the export cursor of a session file lives: beside it."""
    return session_path.with_name(session_path.name + ".export-cursor")


@dataclass(slots=True)
class Cursor:
    """Export progress of one session file: spans ended before ``seq`` were exported."""

    session_id: str | None = None
    seq: int = 0
    offset: int = 0

    @classmethod
    def load(cls, path: Path) -> Cursor:
        """Read a cursor file; a missing file means nothing was exported yet."""
        try:
            check_regular(path)
            obj = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return cls()
        except orjson.JSONDecodeError as exc:
            raise FormatError(
                f"{path}: the export cursor is damaged ({exc}); delete it to export the "
                "whole session again (spans already sent would be sent twice)",
                path=path,
            ) from None
        session_id = obj.get("session_id") if isinstance(obj, dict) else None
        seq = obj.get("seq", 0) if isinstance(obj, dict) else None
        offset = obj.get("offset", 0) if isinstance(obj, dict) else None
        if (
            not isinstance(session_id, str | None)
            or type(seq) is not int
            or type(offset) is not int
            or seq < 0
            or offset < 0
        ):
            raise FormatError(
                f"{path}: the export cursor has the wrong shape (expected "
                '{"session_id": str, "seq": int >= 0, "offset": int >= 0}); delete it to '
                "export the whole session again (spans already sent would be sent twice)",
                path=path,
            )
        return cls(session_id, seq, offset)

    def save(self, path: Path) -> None:
        """Replace the cursor file atomically (write, fsync, rename), mode 0600."""
        data = {"session_id": self.session_id, "seq": self.seq, "offset": self.offset}
        replace_file(path, orjson.dumps(data))


@dataclass(slots=True)
class ExportResult:
    """What one export of one file did."""

    path: Path
    destination: str
    sent: int = 0
    skipped: int = 0
    failed: int = 0
    dropped: int = 0

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object."""
        return {
            "file": str(self.path),
            "destination": self.destination,
            "sent": self.sent,
            "skipped": self.skipped,
            "failed": self.failed,
            "dropped": self.dropped,
        }


@dataclass(slots=True)
class _Collect(SpanProcessor):
    """Receives the bridge's finished spans, each with the seq of the record that emitted it."""

    spans: list[tuple[int, ReadableSpan]] = field(default_factory=list)
    seq: int = 0
    """The record being replayed."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Spans from the bridge arrive finished; nothing starts here."""

    def on_end(self, span: ReadableSpan) -> None:
        """Keep a finished span until the next export."""
        self.spans.append((self.seq, span))


class ResumableExport:
    """Exports the spans of one session file, resuming from its cursor.

    Args:
        path: The session file.
        exporter: Where spans go; by default the one ``default_processor`` would use.
        destination: How to name the destination in results (never a secret).
        export_timeout_s: The longest one export call may take, however the
            collector answers (one that trickles bytes never trips a socket
            timeout); default ``OTEL_EXPORTER_OTLP_TIMEOUT`` or 10 s. A call
            that takes longer counts as failed: its spans are kept for retry.
        ref_base: Where span references point (see ``SpanBridge``): a store URL
            or a viewer URL template.
    """

    def __init__(
        self,
        path: Path,
        exporter: SpanExporter | None = None,
        destination: str | None = None,
        *,
        export_timeout_s: float | None = None,
        ref_base: str | None = None,
    ) -> None:
        from .otel import SpanBridge
        from .otel._export import default_exporter, default_timeout_s, describe_destination

        self.path = path
        self.cursor_path = cursor_path(path)
        self.cursor = Cursor.load(self.cursor_path)
        self._exporter = exporter if exporter is not None else default_exporter(path)
        self._destination = destination or describe_destination(path)
        self._collect = _Collect()
        self._bridge = SpanBridge(self._collect, file_uri=path, ref_base=ref_base)
        self._backlog: list[tuple[int, ReadableSpan]] = []
        self._last: Record | None = None
        self._timeout_s = default_timeout_s() if export_timeout_s is None else export_timeout_s
        self._stop = threading.Event()

    def run(
        self,
        *,
        follow: bool = False,
        stop: threading.Event | None = None,
        poll_interval: float = 0.2,
        on_progress: Callable[[int], None] | None = None,
    ) -> ExportResult:
        """Export every span not yet exported; with ``follow``, keep going until ``stop``.

        Returns:
            Counts of spans sent, skipped (sent by an earlier run), failed and dropped.
        """
        result = ExportResult(self.path, self._destination)
        stop = self._stop = stop or threading.Event()
        try:
            self._feed(read(self.path, decode=False), result, on_progress, None)
            self._ship(result, final=not follow)
            while follow and not stop.is_set():
                offset = self._last.end_offset if self._last is not None else 0
                source = self._follow(offset, stop, poll_interval)
                self._feed(source, result, on_progress, time.monotonic() + FLUSH_INTERVAL_S)
                self._ship(result, final=stop.is_set())
                if self._backlog and not stop.is_set():
                    stop.wait(poll_interval)
        finally:
            self._shutdown()
        return result

    def _shutdown(self) -> None:
        """Shut the exporter down without waiting on an abandoned call for long."""
        worker = threading.Thread(
            target=self._exporter.shutdown, name="loopscribe exporter shutdown", daemon=True
        )
        worker.start()
        worker.join(1.0 if self._stop.is_set() else self._timeout_s)

    def _follow(self, offset: int, stop: threading.Event, poll_interval: float) -> Iterable[Record]:
        return follow(
            self.path,
            offset,
            decode=False,
            poll_interval=poll_interval,
            idle_timeout=FLUSH_INTERVAL_S,
            stop=stop,
        )

    def _feed(
        self,
        records: Iterable[Record],
        result: ExportResult,
        on_progress: Callable[[int], None] | None,
        deadline: float | None,
    ) -> None:
        for record in records:
            if self._stop.is_set():
                return  # SIGINT/SIGTERM: ship what is done, save the cursor, stop
            if self._last is None and record.session_id != self.cursor.session_id:
                if self.cursor.session_id is not None:
                    logger.warning(
                        "%s: the export cursor belongs to session %s, not %s; exporting "
                        "the whole file",
                        self.path,
                        self.cursor.session_id,
                        record.session_id,
                    )
                self.cursor = Cursor(record.session_id)
            self._collect.seq = record.seq
            self._bridge(record)
            self._last = record
            if on_progress is not None:
                on_progress(record.end_offset)
            if len(self._collect.spans) >= BATCH_SPANS:
                self._ship(result, final=False)
            if deadline is not None and time.monotonic() >= deadline:
                return

    def _ship(self, result: ExportResult, *, final: bool) -> None:
        """Export what the bridge finished; advance the cursor only on success."""
        for emitted in self._collect.spans:
            if emitted[0] < self.cursor.seq:
                result.skipped += 1
            else:
                self._backlog.append(emitted)
        self._collect.spans.clear()
        if len(self._backlog) > MAX_BACKLOG_SPANS:
            excess = len(self._backlog) - MAX_BACKLOG_SPANS
            del self._backlog[:excess]
            result.dropped += excess
            logger.warning("%s: %d spans dropped: the collector is unreachable", self.path, excess)
        while self._backlog:
            batch = [span for _, span in self._backlog[:BATCH_SPANS]]
            if not self._export(batch):
                # Every span emitted before the first unsent one is out: keep that much.
                self._advance(min(seq for seq, _ in self._backlog), None)
                if final:
                    result.failed += len(self._backlog)
                    self._backlog.clear()
                return
            del self._backlog[: len(batch)]
            result.sent += len(batch)
        if self._last is not None:
            self._advance(self._last.seq + 1, self._last.end_offset)

    def _advance(self, seq: int, offset: int | None) -> None:
        if seq > self.cursor.seq:
            self.cursor.seq = seq
            if offset is not None:
                self.cursor.offset = offset
            self.cursor.save(self.cursor_path)

    def _export(self, batch: Sequence[ReadableSpan]) -> bool:
        """Export one batch, waiting at most the export timeout, and less once stopped.

        The exporter's own timeouts bound each socket operation, not the call:
        a collector that sends a byte now and then holds it forever. So the
        call runs on a daemon thread that is abandoned (its spans kept for
        retry) when the deadline passes or a stop is asked for.
        """
        if self._stop.is_set():
            return False
        done = threading.Event()
        outcome: list[bool] = []

        def export() -> None:
            try:
                outcome.append(self._exporter.export(batch) is SpanExportResult.SUCCESS)
            except Exception:
                logger.exception("%s: export of %d spans failed", self.path, len(batch))
                outcome.append(False)
            finally:
                done.set()

        worker = threading.Thread(target=export, name="loopscribe export call", daemon=True)
        worker.start()
        deadline = time.monotonic() + self._timeout_s
        while not done.wait(_WAIT_SLICE_S):
            if self._stop.is_set():
                logger.warning("%s: stopped while exporting %d spans", self.path, len(batch))
                return False
            if time.monotonic() >= deadline:
                logger.warning(
                    "%s: export of %d spans took longer than %.1f s; they are kept for retry",
                    self.path,
                    len(batch),
                    self._timeout_s,
                )
                return False
        return bool(outcome and outcome[0])

"""``loopscribe report``: a session's run timelines as one self-contained HTML file.

The file holds the viewer's stylesheet and script inline, the timeline of
every run, and the records behind each bar (bodies clipped unless
``full=True``). It loads nothing from anywhere: its Content-Security-Policy
forbids every network request, so it can be attached to a bug report and
opened from disk.

It opens at once whatever the session's size: the page's data is only the
timelines (references and labels, as the viewer's JSON), with the first
:data:`REPORT_FIRST_ROWS` rows of each run (the others follow the script,
read when another page of rows is asked for); the records come after the
script too, in gzip-compressed chunks of about
:data:`REPORT_CHUNK_CHARS` characters of JSON (base64, one
``<script type="application/gzip">`` element each), so the browser draws
the timeline while it is still reading them, and a chunk is decompressed
(``DecompressionStream``) only when a bar whose records it holds is
selected. ``records`` in the data maps each chunk to the seqs it holds.
"""

from __future__ import annotations

import base64
import io
import os
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from .. import events as ev
from .._safeopen import open_session_file
from .._timeline import SessionTimeline, iso, load_timeline
from ..workspace import Workspace
from ._clip import record_view
from ._context import derived_context, has_messages
from ._index import summary_json
from ._page import embed_json, shell

__all__ = [
    "REPORT_CHUNK_CHARS",
    "REPORT_CSP",
    "REPORT_STRING_LIMIT_CHARS",
    "build_report",
    "stream_report",
    "write_report",
]

REPORT_STRING_LIMIT_CHARS = 65_536
"""A string longer than this is cut in a report made without ``full``."""
_REPORT_BUDGET_CHARS = 1 << 20
REPORT_FIRST_ROWS = 300
"""Timeline rows a run's data holds before the script; the rest follow it (drawn on demand)."""
REPORT_CHUNK_CHARS = 1 << 18
"""Records are compressed together until their JSON passes this many characters."""
_GZIP_LEVEL = 1
"""Fast: the text compresses well at any level, and a large report is written in seconds."""

REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
"""No request leaves the report: not a script, a font, an image or a fetch."""


def build_report(
    path: str | os.PathLike[str],
    *,
    run_ids: tuple[str, ...] = (),
    full: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> str:
    """The report of one session file, as HTML text (:func:`write_report` streams it instead).

    Args:
        path: The session file.
        run_ids: Only these runs (default: every run).
        full: Embed every body whole instead of clipping long strings.
        on_progress: Called with the byte offset reached while records are read.

    Returns:
        The HTML document.

    Raises:
        LookupError: A run in ``run_ids`` is not in the file.
        CorruptRecordError: A complete line is damaged.
        OSError: The file cannot be read.
    """
    out = io.StringIO()
    stream_report(path, out, run_ids=run_ids, full=full, on_progress=on_progress)
    return out.getvalue()


def stream_report(
    path: str | os.PathLike[str],
    out: TextIO,
    *,
    run_ids: tuple[str, ...] = (),
    full: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> None:
    """Write the report of a session file to a text stream, one record at a time.

    Memory stays bounded by the timeline (labels and offsets) and the largest
    single record, not by the file: a 150 MB session is never held whole.
    Arguments and errors as for :func:`build_report`.
    """
    source = Path(path)
    timeline = load_timeline(source)
    runs = list(timeline.iter_runs())
    if run_ids:
        unknown = [r for r in run_ids if r not in timeline.runs]
        if unknown:
            raise LookupError(
                f"{source}: no run {', '.join(unknown)} (its runs: {', '.join(timeline.runs)})"
            )
        runs = [timeline.runs[r] for r in run_ids]
    wanted: set[int] = set()
    for run in runs:
        wanted.update(run.records)
        for bar in run.bars.values():
            wanted.update(bar.seqs)
    # A compaction's summary opens the context an imported model call shows.
    wanted.update(timeline.compaction_seqs)
    summary = Workspace(source.absolute().parent).summary_of_path(source.absolute())
    note = (
        "Every body is complete."
        if full
        else f"Strings longer than {REPORT_STRING_LIMIT_CHARS:,} characters are cut "
        "(make the report with --full to keep them whole)."
    )
    head: dict[str, Any] = {
        "mode": "report",
        "view": "report",
        "file": str(source),
        "generated": iso(datetime.now(UTC)),
        "note": note,
        "session": summary_json(summary, timeline),
        "runs": [run.to_json() for run in runs],
    }
    # The first page of each run's rows in the data; all of them after the script.
    every: list[list[Any]] = []
    for number, shown in enumerate(head["runs"]):
        every.append(shown["rows"])
        if len(shown["rows"]) > REPORT_FIRST_ROWS:
            shown["rows"] = shown["rows"][:REPORT_FIRST_ROWS]
            shown["rows_element"] = f"ls-rows-{number}"
    title = f"{summary.title or 'session ' + timeline.session_id[:12]} · loopscribe report"
    before, after = shell(title, inline=True, csp=REPORT_CSP)
    seqs = sorted(wanted)
    chunks = _plan_chunks(timeline, seqs)
    head["records"] = {"chunks": chunks}
    out.write(before)
    out.write(embed_json(head))
    # The records after the script, so the page is drawn while they are still read.
    tail, end = after.rsplit("</body>", 1)
    out.write(tail)
    for number, shown in enumerate(head["runs"]):
        if "rows_element" in shown:
            out.write(
                f'<script type="application/json" id="{shown["rows_element"]}">'
                f"{embed_json(every[number])}</script>\n"
            )
    del every
    records = _records(timeline, seqs, full, on_progress)
    for number, chunk in enumerate(chunks):
        text = io.StringIO()
        text.write("{")
        for i, _ in enumerate(chunk):
            seq, record = next(records)
            text.write(("," if i else "") + f'"{seq}":' + orjson.dumps(record).decode())
        text.write("}")
        packed = zlib.compress(text.getvalue().encode(), _GZIP_LEVEL, wbits=31)
        out.write(
            f'<script type="application/gzip" id="ls-chunk-{number}">'
            f"{base64.b64encode(packed).decode()}</script>\n"
        )
    out.write("</body>" + end)


def _plan_chunks(timeline: SessionTimeline, seqs: list[int]) -> list[list[int]]:
    """Seqs grouped in order, each group about ``REPORT_CHUNK_CHARS`` of the file's bytes."""
    chunks: list[list[int]] = []
    current: list[int] = []
    size = 0
    for seq in seqs:
        where = timeline.locate(seq)
        current.append(seq)
        size += 0 if where is None else where[1]
        if size >= REPORT_CHUNK_CHARS:
            chunks.append(current)
            current, size = [], 0
    if current:
        chunks.append(current)
    return chunks


def _records(
    timeline: SessionTimeline,
    seqs: list[int],
    full: bool,
    on_progress: Callable[[int], None] | None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    limit = None if full else REPORT_STRING_LIMIT_CHARS
    with open_session_file(timeline.path) as stream:
        fd = stream.fileno()
        for seq in seqs:
            where = timeline.locate(seq)
            if where is None:  # pragma: no cover - seqs come from the same fold
                continue
            offset, size = where
            raw = os.pread(fd, size, offset)
            record = record_view(orjson.loads(raw), offset, size, limit, _REPORT_BUDGET_CHARS)
            if record["type"] == ev.MODEL_REQUEST and not has_messages(record["data"]):
                # The report embeds those records anyway: name them, do not copy them.
                record["context"] = derived_context(timeline, seq, seqs_only=True)
            yield seq, record
            if on_progress is not None:
                on_progress(offset + size)


def write_report(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    run_ids: tuple[str, ...] = (),
    full: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> Path:
    """Write the report of a session file to ``out`` (see :func:`build_report`), streamed.

    The file is written beside its final name and renamed into place, so an
    interrupted run never leaves half a report.

    Returns:
        The report's path.
    """
    target = Path(out)
    partial = target.with_name(f".{target.name}.partial")
    try:
        # 0600, like session files: a report holds every body of the session.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        with open(fd, "w", encoding="utf-8", buffering=1 << 20) as stream:
            stream_report(path, stream, run_ids=run_ids, full=full, on_progress=on_progress)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    return target

"""``loopscribe report``: a session's run timelines as one self-contained HTML file.

The file holds the viewer's stylesheet and script inline, the timeline of
every run, and the records behind each bar (bodies clipped unless
``full=True``). It loads nothing from anywhere: its Content-Security-Policy
forbids every network request, so it can be attached to a bug report and
opened from disk.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from .. import events as ev
from .._safeopen import open_session_file
from ..workspace import Workspace
from ._context import derived_context, has_messages
from ._index import summary_json
from ._page import embed_json, shell
from ._store import record_view
from ._timeline import SessionTimeline, iso, load_timeline

__all__ = [
    "REPORT_CSP",
    "REPORT_STRING_LIMIT_CHARS",
    "build_report",
    "stream_report",
    "write_report",
]

REPORT_STRING_LIMIT_CHARS = 65_536
"""A string longer than this is cut in a report made without ``full``."""
_REPORT_BUDGET_CHARS = 1 << 20

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
    title = f"{summary.title or 'session ' + timeline.session_id[:12]} · loopscribe report"
    before, after = shell(title, inline=True, csp=REPORT_CSP)
    out.write(before)
    # The data object, written member by member: its head, then each record.
    out.write(embed_json(head)[:-1])
    out.write(',"records":{')
    first = True
    for seq, record in _records(timeline, sorted(wanted), full, on_progress):
        out.write(("" if first else ",") + f'"{seq}":' + embed_json(record))
        first = False
    out.write("}}")
    out.write(after)


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

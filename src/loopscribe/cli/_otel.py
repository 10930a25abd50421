"""``loopscribe export``, ``find`` and ``span``: sessions as OpenTelemetry spans."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from rich.markup import escape

from .._errors import LoopscribeError
from .._model import Record
from .._reader import read
from ..otel._ids import record_span, run_trace_id
from ._find import (
    find_records,
    find_sessions,
    record_json,
    resolve_record,
    resolve_session,
    resolve_targets,
)
from ._options import REF_BASE_HELP, SESSION_HELP, add_interval_option, count, home_of, parse_hex
from ._output import CliError, NotFoundError, Out, StopFlag, UsageError
from ._resolve import parse_reference
from ._tables import fitted_table
from ._terminal import printable_json


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``export``, ``find`` and ``span`` to the ``loopscribe`` parser."""
    p = sub.add_parser(
        "export",
        help="send the spans of session files to OTLP (or the embedded file)",
        description=(
            "Send spans for session files. The destination comes from the standard "
            "OTEL_EXPORTER_OTLP_* variables; without them spans go to FILE.otlp.jsonl "
            "beside each session. A cursor (FILE.export-cursor) remembers what was sent, "
            "so running again sends only new spans."
        ),
    )
    p.add_argument(
        "files",
        nargs="+",
        metavar="SESSION",
        help="session files, folders (searched recursively) or session IDs; span files, "
        "cursors and other files in a folder or glob are skipped",
    )
    p.add_argument("--follow", "-f", action="store_true", help="keep sending as files grow")
    add_interval_option(p, 0.2, "with --follow: how often to look for new records")
    p.add_argument("--ref-base", metavar="URL", help=REF_BASE_HELP)
    p.add_argument(
        "--metrics",
        action="store_true",
        help="send the sessions' GenAI metrics (tokens, latency, tools, agents) at their "
        "recorded times instead of spans; without an endpoint, FILE.metrics.otlp.jsonl",
    )
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser(
        "find",
        help="print the records behind a span reference, a trace or a span",
        description=(
            "Print the records a reference copied from a span or the viewer points at "
            "(file:///…#seq=N, a viewer link, TRACE_ID/SPAN_ID), or search session files "
            "for the records behind --trace-id (and --span-id). Searches the sessions home "
            "unless REF names a folder, a file or a store URL."
        ),
    )
    p.add_argument(
        "dir",
        nargs="?",
        default=None,
        metavar="REF",
        help="a record reference (file:///…#seq=N, a gen_ai.*_ref), a viewer link, "
        "TRACE_ID/SPAN_ID, a session ID, or a folder, file or store URL to search "
        "(default: the sessions home)",
    )
    p.add_argument("--trace-id", metavar="HEX", help="the trace ID (32 hex digits)")
    p.add_argument("--span-id", metavar="HEX", help="only the records of this span (16 hex digits)")
    p.add_argument(
        "--genai-json",
        action="store_true",
        help="print the model calls' messages in the GenAI conventions' JSON schema",
    )
    p.set_defaults(handler=cmd_find)

    p = sub.add_parser(
        "span",
        help="print the trace and span ID of a record",
        description="Print the OpenTelemetry trace ID and span ID that a record belongs to.",
    )
    p.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    p.add_argument(
        "--seq", type=count, required=True, metavar="N", help="the record's sequence number"
    )
    p.set_defaults(handler=cmd_span)


# -- loopscribe span -----------------------------------------------------------


def cmd_span(args: argparse.Namespace, out: Out) -> int:
    """Print the trace and span ID of one record."""
    path = resolve_session(args.session, home_of(args))
    traces: dict[str, int] = {}
    for record in read(path, decode=False):
        if record.type == "run_start":
            traces[record.run_id or ""] = run_trace_id(record)
        if record.seq != args.seq:
            continue
        ids = record_span(record, traces.get(record.run_id or "", 0))
        if ids is None:
            raise CliError(f"{path}: seq {args.seq} is session_start, which belongs to no span")
        trace, span = ids
        if out.json:
            out.emit({"trace_id": f"{trace:032x}", "span_id": f"{span:016x}", "seq": record.seq})
        else:
            out.stdout.print(f"trace_id {trace:032x}", highlight=False)
            out.stdout.print(f"span_id  {span:016x}", highlight=False)
            out.stderr.print(
                f"records: loopscribe find {path.parent} --trace-id {trace:032x} "
                f"--span-id {span:016x}",
                highlight=False,
                markup=False,
                style="dim",
            )
        return 0
    raise CliError(f"{path}: no record with seq {args.seq}")


# -- loopscribe find -------------------------------------------------------------


def cmd_find(args: argparse.Namespace, out: Out) -> int:
    """Print the records behind a reference, a trace or a span, bodies included."""
    home = home_of(args)
    if args.genai_json:
        from ._genai import cmd_find_genai

        if args.dir is None:
            args.dir = str(home)
        return cmd_find_genai(args, out)
    where: Path = home
    trace = None if args.trace_id is None else parse_hex(args.trace_id, 128, "trace id")
    span = None if args.span_id is None else parse_hex(args.span_id, 64, "span id")
    if args.dir is not None:
        try:
            ref = parse_reference(args.dir)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        if ref.is_span:
            trace, span = ref.trace_id, ref.span_id if ref.span_id is not None else span
        elif ref.seq is not None or ref.span_id is not None:
            path, seq = resolve_record(args.dir, home)
            return _show_one(path, seq, ref.span_id, args, out)
        elif ref.session is not None:
            where = resolve_session(args.dir, home)
        else:
            assert ref.path is not None
            where = ref.path
    if trace is None:
        raise UsageError(
            "give a reference (file:///…#seq=N, a viewer link, TRACE_ID/SPAN_ID) or "
            "--trace-id (and --span-id)"
        )
    args.trace_id = f"{trace:032x}"
    args.span_id = None if span is None else f"{span:016x}"
    searched = find_sessions(where)
    files = searched.sessions
    if not files:
        raise searched.error(str(where))
    args.dir = str(where)
    return show_found(
        find_records(files, trace, span, out),
        args,
        out,
        heading=lambda path, record: (path.name, f"session {record.session_id}"),
        searched=f"{len(files)} session files searched",
    )


def _show_one(
    path: Path, seq: int | None, span: int | None, args: argparse.Namespace, out: Out
) -> int:
    """Print the record a reference names (or, for a session's span, the span's records)."""
    args.dir = str(path)
    if span is not None:
        found = [
            (path, r)
            for r in read(path, decode=False)
            if (ids := record_span(r, 0)) is not None and ids[1] == span
        ]
        args.trace_id, args.span_id = "-", f"{span:016x}"
        return show_found(found, args, out, heading=_heading, searched="1 session file searched")
    records = [(path, r) for r in read(path, decode=False) if r.seq == seq]
    if not records:
        raise NotFoundError(f"{path}: no record with seq {seq}")
    args.trace_id, args.span_id = "-", None
    return show_found(records, args, out, heading=_heading, searched="1 session file searched")


def _heading(path: Path, record: Record) -> tuple[str, str]:
    return path.name, f"session {record.session_id}"


def show_found(
    found: Iterable[tuple[Path, Record]],
    args: argparse.Namespace,
    out: Out,
    *,
    heading: Callable[[Path, Record], tuple[str, str]],
    searched: str,
) -> int:
    """Print each found record (``heading`` gives its title and where it is); none is an error."""
    count = 0
    for path, record in found:
        count += 1
        if out.json:
            out.emit(record_json(record, path))
            continue
        title, where = heading(path, record)
        ex = record.execution
        what = f"{ex.kind} {ex.id} attempt {ex.attempt}" if ex else "run"
        out.stdout.rule(
            escape(f"{title} · seq {record.seq} · {record.type} · {what}"), style="cyan"
        )
        out.stdout.print(
            f"{where}  run {record.run_id}  {record.ts.isoformat().replace('+00:00', 'Z')}",
            highlight=False,
            style="dim",
            markup=False,
        )
        out.stdout.print(printable_json(record.data))
    if not count:
        target = (
            f"span {args.span_id} of trace {args.trace_id}"
            if args.span_id is not None
            else f"trace {args.trace_id}"
        )
        raise NotFoundError(f"no records for {target} in {args.dir} ({searched})")
    return 0


# -- loopscribe export ------------------------------------------------------------


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    """Send the spans of session files, resuming from each file's cursor."""
    from .._resumable_export import ExportResult, ResumableExport

    stop = StopFlag()
    stop.install()  # also without --follow: Ctrl-C saves the cursor and prints no traceback
    paths = resolve_targets(args.files, home_of(args)).sessions
    if not paths:
        raise CliError(
            f"no loopscribe sessions in {' '.join(args.files)} (span files, cursors and "
            "other files are skipped)"
        )
    if getattr(args, "metrics", False):
        return _export_metrics(paths, out)
    results: dict[int, ExportResult] = {}
    errors: dict[int, str] = {}
    lock = threading.Lock()

    def ship(index: int, path: Path) -> None:
        try:
            export = ResumableExport(path, ref_base=args.ref_base)
            total = path.stat().st_size
            with out.progress(total) as bar:
                task = bar.add_task(path.name, total=total)

                def advance(offset: int) -> None:
                    bar.update(task, completed=offset)

                result = export.run(
                    follow=args.follow,
                    stop=stop.event,
                    poll_interval=args.interval,
                    on_progress=advance,
                )
        except (LoopscribeError, OSError) as exc:
            with lock:
                errors[index] = str(exc)
            return
        with lock:
            results[index] = result

    threads = [
        threading.Thread(target=ship, args=(i, p), name=f"export {p.name}")
        for i, p in enumerate(paths)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    ordered = [results[i] for i in sorted(results)]  # in the order the files were given
    if out.json:
        for result in ordered:
            out.emit(result.to_json())
    else:
        headers = ["file", "spans\nsent", "already\nsent", "not\nsent", "destination"]
        rows = [
            [str(r.path), str(r.sent), str(r.skipped), str(r.failed), r.destination]
            for r in ordered
        ]
        table = fitted_table(headers, rows, out.stdout.width, flexible=[0, 4], paths=[0, 4])
        out.stdout.print(table)
    for i in sorted(errors):
        out.stderr.print(
            f"loopscribe: error: {errors[i]}", highlight=False, markup=False, style="red"
        )
    return 1 if errors or any(r.failed for r in ordered) else 0


def _export_metrics(paths: list[Path], out: Out) -> int:
    """``export --metrics``: each file's GenAI metrics, stamped with the recorded times."""
    from ..otel import export_metrics

    failed = 0
    for path in paths:
        try:
            points = export_metrics(path)
        except (LoopscribeError, OSError, ValueError) as exc:
            failed += 1
            out.stderr.print(
                f"loopscribe: error: {exc}", highlight=False, markup=False, style="red"
            )
            continue
        if out.json:
            out.emit({"path": str(path), "metric_points": points})
        else:
            out.stdout.print(f"{escape(str(path))}: {points} metric points", highlight=False)
    return 1 if failed else 0

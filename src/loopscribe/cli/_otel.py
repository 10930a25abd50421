"""``loopscribe export``, ``find`` and ``span``: sessions as OpenTelemetry spans."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from rich.table import Table

from .._errors import FormatError, LoopscribeError
from .._model import Record
from .._reader import read
from ..otel._ids import parse_traceparent, run_span_id, span_id, trace_id
from ._common import REF_BASE_HELP, CliError, Out, StopFlag, parse_hex, record_json, session_files


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
    p.add_argument("files", nargs="+", metavar="FILE", help="session files")
    p.add_argument("--follow", "-f", action="store_true", help="keep sending as files grow")
    p.add_argument(
        "--poll-interval", type=float, default=0.2, metavar="SECONDS", help="follow poll period"
    )
    p.add_argument("--ref-base", metavar="URL", help=REF_BASE_HELP)
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser(
        "find",
        help="print the records behind a trace or span",
        description="Search session files for the records behind a trace ID and span ID.",
    )
    p.add_argument("dir", metavar="DIR", help="a folder of session files, or one file")
    p.add_argument("--trace-id", required=True, metavar="HEX")
    p.add_argument("--span-id", metavar="HEX")
    p.set_defaults(handler=cmd_find)

    p = sub.add_parser(
        "span",
        help="print the trace and span ID of a record",
        description="Print the OpenTelemetry trace ID and span ID that a record belongs to.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--seq", type=int, required=True, metavar="N")
    p.set_defaults(handler=cmd_span)


def record_span(record: Record, run_trace: int) -> tuple[int, int] | None:
    """The (trace ID, span ID) a record belongs to, or ``None`` for session_start."""
    if record.run_id is None:
        return None
    if record.execution is None:
        return run_trace, run_span_id(record.session_id, record.run_id)
    ex = record.execution
    return run_trace, span_id(record.session_id, record.run_id, ex.id, ex.attempt)


def run_trace_id(record: Record) -> int:
    """The trace ID of the run a ``run_start`` record opens (the host's, if it had one)."""
    assert record.run_id is not None
    parent = parse_traceparent(record.data.get("traceparent"))
    return parent.trace_id if parent is not None else trace_id(record.session_id, record.run_id)


# -- loopscribe span -----------------------------------------------------------


def cmd_span(args: argparse.Namespace, out: Out) -> int:
    """Print the trace and span ID of one record."""
    path = Path(args.file)
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
                style="dim",
            )
        return 0
    raise CliError(f"{path}: no record with seq {args.seq}")


# -- loopscribe find -------------------------------------------------------------


def find_records(
    files: Sequence[Path], trace: int, span: int | None, out: Out
) -> Iterator[tuple[Path, Record]]:
    """The records of ``files`` behind a trace (and span), in file order."""
    for path in files:
        runs: dict[str, int] = {}
        try:
            for record in read(path, decode=False):
                if record.type == "run_start":
                    runs[record.run_id or ""] = run_trace_id(record)
                run_trace = runs.get(record.run_id or "")
                if run_trace != trace:
                    continue
                if span is None or record_span(record, trace) == (trace, span):
                    yield path, record
        except FormatError as exc:
            if not out.json:
                out.stderr.print(
                    f"skipped {path}: {exc}", highlight=False, markup=False, style="yellow"
                )


def cmd_find(args: argparse.Namespace, out: Out) -> int:
    """Print the records behind a trace or span, bodies included."""
    trace = parse_hex(args.trace_id, 128, "trace id")
    span = None if args.span_id is None else parse_hex(args.span_id, 64, "span id")
    files = session_files(Path(args.dir))
    found = 0
    for path, record in find_records(files, trace, span, out):
        found += 1
        if out.json:
            out.emit(record_json(record, path))
            continue
        ex = record.execution
        where = f"{ex.kind} {ex.id} attempt {ex.attempt}" if ex else "run"
        out.stdout.rule(f"{path.name} · seq {record.seq} · {record.type} · {where}", style="cyan")
        out.stdout.print(
            f"session {record.session_id}  run {record.run_id}  "
            f"{record.ts.isoformat().replace('+00:00', 'Z')}",
            highlight=False,
            style="dim",
        )
        out.stdout.print_json(data=record.data)
    if not found:
        target = (
            f"span {args.span_id} of trace {args.trace_id}" if span else f"trace {args.trace_id}"
        )
        raise CliError(
            f"no records for {target} in {args.dir} ({len(files)} session files searched)"
        )
    return 0


# -- loopscribe export ------------------------------------------------------------


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    """Send the spans of session files, resuming from each file's cursor."""
    from .._shipper import ExportResult, Shipper

    stop = StopFlag()
    if args.follow:
        stop.install()
    results: list[ExportResult] = []
    errors: list[str] = []
    lock = threading.Lock()

    def ship(path: Path) -> None:
        try:
            shipper = Shipper(path, ref_base=args.ref_base)
            total = path.stat().st_size
            with out.progress(total) as bar:
                task = bar.add_task(path.name, total=total)

                def advance(offset: int) -> None:
                    bar.update(task, completed=offset)

                result = shipper.run(
                    follow=args.follow,
                    stop=stop.event,
                    poll_interval=args.poll_interval,
                    on_progress=advance,
                )
        except (LoopscribeError, OSError) as exc:
            with lock:
                errors.append(str(exc))
            return
        with lock:
            results.append(result)

    paths = [Path(p) for p in args.files]
    threads = [threading.Thread(target=ship, args=(p,), name=f"export {p.name}") for p in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    if out.json:
        for result in results:
            out.emit(result.to_json())
    else:
        table = Table("file", "spans sent", "already sent", "not sent", "destination")
        for r in results:
            table.add_row(str(r.path), str(r.sent), str(r.skipped), str(r.failed), r.destination)
        out.stdout.print(table)
    for error in errors:
        out.stderr.print(f"loopscribe: error: {error}", highlight=False, markup=False, style="red")
    return 1 if errors or any(r.failed for r in results) else 0

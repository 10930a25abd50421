"""The ``loopscribe`` command line.

Output follows the ecosystem's habits: tables and colour only on a terminal,
``--json`` for scripts, progress bars on stderr for long work, errors as one
line on stderr with exit status 1 (2 for usage errors).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ._errors import FormatError, LoopscribeError
from ._model import Record
from ._reader import read
from .otel._ids import parse_traceparent, run_span_id, span_id, trace_id

REF_BASE_HELP = (
    "where span references point instead of the local file: the store URL sessions are "
    "shipped to (s3://bucket/prefix), or a viewer URL template with {session_id} and {seq}; "
    "default $LOOPSCRIBE_REF_BASE"
)
PROGRESS_MIN_BYTES = 8 << 20
"""Files smaller than this get no progress bar."""


class CliError(Exception):
    """A failure to report as one line on stderr, with exit status 1."""


@dataclass(frozen=True, slots=True)
class Out:
    """Where results and diagnostics go."""

    stdout: Console
    stderr: Console
    json: bool

    def emit(self, obj: Any) -> None:
        """Write one JSON line to stdout (``--json``)."""
        sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE))
        sys.stdout.flush()

    def progress(self, total: int) -> Progress:
        """A byte progress bar on stderr, shown only on a terminal for large work."""
        return Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=self.stderr,
            transient=True,
            disable=total < PROGRESS_MIN_BYTES or not self.stderr.is_terminal,
        )


def session_files(root: Path) -> list[Path]:
    """The session files named by ``root``: itself, or every ``*.jsonl`` below it.

    Exported spans (``*.otlp.jsonl``) and files in artifact folders are not sessions.
    """
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise CliError(f"{root}: no such file or folder")
    return sorted(
        p
        for p in root.rglob("*.jsonl")
        if not p.name.endswith(".otlp.jsonl")
        and not any(part.endswith(".artifacts") for part in p.relative_to(root).parts[:-1])
        and p.is_file()
    )


def record_json(record: Record, path: Path | None = None) -> dict[str, Any]:
    """A Record as the JSON object of its line (plus ``file`` when given)."""
    out: dict[str, Any] = {}
    if path is not None:
        out["file"] = str(path)
    out.update(
        session_id=record.session_id,
        seq=record.seq,
        type=record.type,
        run_id=record.run_id,
        ts=record.ts.isoformat().replace("+00:00", "Z"),
    )
    if record.execution is not None:
        out["execution"] = record.execution.to_json()
    out["data"] = record.data
    return out


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


def parse_hex(value: str, bits: int, what: str) -> int:
    """Parse a hex trace or span ID, with a helpful error."""
    text = value.lower().removeprefix("0x")
    try:
        number = int(text, 16)
    except ValueError:
        raise CliError(f"{what} {value!r} is not hexadecimal") from None
    if not 0 < number < 1 << bits or len(text) > bits // 4:
        raise CliError(f"{what} {value!r} must be 1 to {bits // 4} hex digits and not zero")
    return number


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


class _StopFlag:
    """Set by SIGINT/SIGTERM so a follower flushes and saves its cursor before exiting."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.event.set()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    """Send the spans of session files, resuming from each file's cursor."""
    from ._shipper import ExportResult, Shipper

    stop = _StopFlag()
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


# -- loopscribe ls / show / tail ----------------------------------------------------


def summary_json(summary: Any) -> dict[str, Any]:
    """A SessionSummary as JSON."""
    out = {k: getattr(summary, k) for k in summary.__dataclass_fields__}
    out["path"] = str(summary.path)
    out["created"] = summary.created.isoformat()
    out["updated"] = summary.updated.isoformat()
    if summary.compaction is not None:
        out["compaction"] = {
            "at": summary.compaction.at.isoformat(),
            "seq": summary.compaction.seq,
            "messages_before": summary.compaction.messages_before,
        }
    return out


def message_text(message: Any) -> tuple[str, str]:
    """(role, text) of a built-in or dict message, for terminal display."""
    from ._messages import TextContent, ToolCall

    if isinstance(message, Mapping):
        role = str(message.get("role", "?"))
        content = message.get("content")
    else:
        role = str(getattr(message, "role", type(message).__name__))
        content = getattr(message, "content", message)
    if isinstance(content, str):
        return role, content
    parts: list[str] = []
    for block in content if isinstance(content, list | tuple) else [content]:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ToolCall):
            parts.append(f"[tool call {block.name} {orjson.dumps(block.arguments).decode()}]")
        elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block is not None:
            parts.append(orjson.dumps(block, default=str).decode())
    return role, "\n".join(parts)


def cmd_ls(args: argparse.Namespace, out: Out) -> int:
    """List the sessions of a workspace folder, newest first."""
    from .workspace import Workspace

    root = Path(args.dir)
    if not root.is_dir():
        raise CliError(f"{root}: no such folder")
    summaries = Workspace(root).list(include_children=args.all)
    if out.json:
        for summary in summaries:
            out.emit(summary_json(summary))
        return 0
    table = Table("session", "title", "status", "model", "msgs", "tokens in/out", "updated")
    colours = {"running": "green", "interrupted": "yellow", "idle": "dim"}
    for s in summaries:
        table.add_row(
            s.id[:12],
            escape(s.title or ""),
            f"[{colours[s.status]}]{s.status}[/]",
            escape(s.model or ""),
            str(s.message_count),
            f"{s.input_tokens}/{s.output_tokens}",
            s.updated.strftime("%Y-%m-%d %H:%M:%S"),
        )
    out.stdout.print(table)
    if not summaries:
        out.stderr.print(f"no sessions in {root}", style="dim", highlight=False)
    return 0


def cmd_show(args: argparse.Namespace, out: Out) -> int:
    """Show a session's summary and its last messages."""
    from .workspace import Workspace

    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"{path}: no such file")
    workspace = Workspace(path.parent)
    summary = workspace.summary_of_path(path)
    page = workspace.messages_of_path(path, last=args.last)
    if out.json:
        out.emit(
            {
                "summary": summary_json(summary),
                "messages": page.messages,
                "has_more": page.has_more,
                "total": page.total,
            }
        )
        return 0
    out.stdout.print(
        f"[bold]{escape(summary.title or summary.id)}[/]  {summary.status}  "
        f"model {escape(summary.model or '-')}  "
        f"{summary.message_count} messages  tokens {summary.input_tokens}/{summary.output_tokens}"
    )
    if page.has_more:
        # The summary above was just folded, so the page's total is known.
        earlier = (page.total or summary.message_count) - len(page.messages)
        out.stdout.print(f"… {earlier} earlier messages (use --last)", style="dim")
    for message in page.messages:
        role, body = message_text(message)
        out.stdout.print(f"[bold cyan]{escape(role)}[/]")
        out.stdout.print(body, markup=False, highlight=False)
    return 0


def cmd_tail(args: argparse.Namespace, out: Out) -> int:
    """Print the last records of a session file, and with -f every new one."""
    from .live import follow
    from .workspace import tail_offset

    path = Path(args.file)
    stop = _StopFlag()
    if args.follow:
        stop.install()
    else:
        stop.event.set()  # print what is there, then stop
    start = tail_offset(path, max(args.lines, 0))
    for record in follow(path, start, decode=False, stop=stop.event):
        if out.json:
            out.emit(record_json(record))
            continue
        ex = record.execution
        where = f" {ex.kind} {ex.id}#{ex.attempt}" if ex else ""
        ts = record.ts.strftime("%H:%M:%S.%f")[:-3]
        out.stdout.print(
            f"{record.seq:>6} {ts} [bold]{escape(record.type)}[/]{escape(where)}", highlight=False
        )
    return 0


# -- loopscribe verify ------------------------------------------------------------


def cmd_verify(args: argparse.Namespace, out: Out) -> int:
    """Check the hash chain of a session file."""
    from ._verify import verify

    report = verify(Path(args.file))
    if out.json:
        broken = report.broken
        out.emit(
            {
                "file": str(report.path),
                "records": report.records,
                "chained": report.chained,
                "sealed": report.sealed,
                "ok": report.ok,
                "head": report.head,
                "broken": None
                if broken is None
                else {
                    "seq": broken.seq,
                    "line": broken.line,
                    "offset": broken.offset,
                    "reason": broken.reason,
                },
            }
        )
    else:
        style = "green" if report.ok else ("red" if report.broken else "yellow")
        out.stdout.print(report.describe(), style=style, highlight=False)
    return 0 if report.ok else 1


# -- entry point -----------------------------------------------------------------


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with the options every command shares (``--json``, ``-v``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--json", action="store_true", help="machine-readable JSON lines output")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = command_parser(
        "loopscribe", "Record AI-agent sessions and bridge them to OpenTelemetry."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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

    p = sub.add_parser("ls", help="list the sessions of a folder, newest first")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--all", "-a", action="store_true", help="include child sessions")
    p.set_defaults(handler=cmd_ls)

    p = sub.add_parser("show", help="a session's summary and its last messages")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--last", "-n", type=int, default=20, metavar="N", help="messages to show")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("tail", help="the last records of a session file; -f follows it")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    p.add_argument("-n", "--lines", type=int, default=10, metavar="N", help="records to show")
    p.set_defaults(handler=cmd_tail)

    p = sub.add_parser(
        "verify",
        help="check the hash chain of a session file",
        description=(
            "Verify a session created with chain=True: report the first broken link "
            "(seq, line, byte offset) or the number of records verified. Exit status 0 "
            "only when the chain is intact and the file is sealed."
        ),
    )
    p.add_argument("file", metavar="FILE")
    p.set_defaults(handler=cmd_verify)

    # Imported here: the viewer's CLI module imports this one.
    from .importers._cli import add_import_parser
    from .store._cli import add_store_parsers
    from .viewer._cli import add_viewer_parsers

    add_viewer_parsers(sub)
    add_import_parser(sub)
    add_store_parsers(sub)  # ship, and store URLs for ls/show/find/verify
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run a parsed command (from :func:`command_parser`); returns the exit status."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="loopscribe: %(levelname)s: %(message)s",
    )
    out = Out(Console(soft_wrap=True), Console(stderr=True, soft_wrap=True), args.json)
    handler: Callable[[argparse.Namespace, Out], int] = args.handler
    try:
        return handler(args, out)
    except BrokenPipeError:  # pragma: no cover - e.g. `loopscribe find ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CliError, LoopscribeError, OSError) as exc:
        out.stderr.print(f"loopscribe: error: {exc}", highlight=False, markup=False, style="red")
        return 1

"""``loopscribe ls``, ``show``, ``tail`` and ``verify``: reading sessions in a terminal."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from textwrap import indent
from typing import TYPE_CHECKING, Any

from rich import box
from rich.markup import escape
from rich.table import Table

from .._errors import LoopscribeError
from .._verify import VerifyReport
from ._find import find_sessions, record_json, resolve_record, resolve_session
from ._options import SESSION_HELP, count, home_of
from ._output import NotFoundError, Out, StopFlag
from ._transcript import entry_of, last_entries

if TYPE_CHECKING:
    from ..workspace import MessagePage, SessionSummary


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ls``, ``show``, ``tail`` and ``verify`` to the ``loopscribe`` parser."""
    p = sub.add_parser(
        "ls",
        help="list your sessions (the sessions home, or a folder), newest first",
        description=(
            "List the sessions in DIR and its subfolders, newest first: ID, title, source, "
            "status, last activity and file. Span files, cursors, artifacts and other files "
            "are skipped. Without DIR, the sessions home (--dir, $LOOPSCRIBE_DIR, else "
            "$XDG_DATA_HOME/loopscribe), where `loopscribe import` puts sessions."
        ),
    )
    p.add_argument(
        "dir",
        nargs="?",
        default=None,
        metavar="DIR",
        help="a folder, a session file or a store URL (default: the sessions home)",
    )
    p.add_argument("--all", "-a", action="store_true", help="include child sessions (subagents)")
    p.set_defaults(handler=cmd_ls)

    p = sub.add_parser(
        "show",
        help="a session's summary, messages, tool calls and results",
        description=(
            "Print a session's summary and its last messages and tool calls: text, "
            "reasoning (folded), every tool call (name, call ID, arguments) and its result "
            "(an error, or 'outcome unknown' where the source does not say)."
        ),
    )
    p.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    p.add_argument(
        "--last",
        "-n",
        type=count,
        default=20,
        metavar="N",
        help="messages and tool calls to show (default 20; 0 shows every one)",
    )
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser(
        "tail",
        help="the last records of a session; -f follows it",
        description=(
            "Print the last records of a session, each message, tool call and result "
            "with its text; with -f, every new one as it comes."
        ),
    )
    p.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    p.add_argument(
        "-n", "--lines", type=count, default=10, metavar="N", help="records to show (default 10)"
    )
    p.set_defaults(handler=cmd_tail)

    p = sub.add_parser(
        "verify",
        help="check the hash chain of a session",
        description=(
            "Verify a session created with chain=True: report the first broken link "
            "(seq, line, byte offset) or the number of records verified. Exit status 1 "
            "when the chain is broken or the file is not sealed; a session without a "
            "chain is reported as such, with exit status 0."
        ),
    )
    p.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    p.set_defaults(handler=cmd_verify)


def summary_json(summary: Any) -> dict[str, Any]:
    """A SessionSummary as JSON."""
    out = {k: getattr(summary, k) for k in summary.__dataclass_fields__}
    out["session_id"] = summary.id  # the name every other command's JSON uses ("id" stays)
    out["path"] = str(summary.path)
    out["created"] = summary.created.isoformat()
    out["updated"] = summary.updated.isoformat()
    out["cost"] = summary.cost.to_json()
    out["cost_unknown_calls"] = summary.cost.unknown
    if summary.compaction is not None:
        out["compaction"] = {
            "at": summary.compaction.at.isoformat(),
            "seq": summary.compaction.seq,
            "messages_before": summary.compaction.messages_before,
        }
    return out


_COST_WIDTH = 9
"""Room for a cost in ls: '$12.3456', '≥$0.0123' or 'unknown'."""

_COLOURS = {
    "running": "green",
    "interrupted": "yellow",
    "failed": "red",
    "idle": "dim",
}


def cmd_ls(args: argparse.Namespace, out: Out) -> int:
    """List the sessions below a folder, newest first."""
    from ..workspace import Workspace

    root = Path(args.dir) if args.dir is not None else home_of(args)
    if args.dir is None and not root.is_dir():
        out.stderr.print(
            f"no sessions in {root} yet (the sessions home): `loopscribe import claude-code` "
            "or `loopscribe import codex` brings your agents' sessions there",
            style="dim",
            highlight=False,
            markup=False,
        )
        return 0
    if not root.exists():
        raise NotFoundError(f"{root}: no such folder or session file")
    found = find_sessions(root)
    found.report_unreadable(out)
    workspaces: dict[Path, Workspace] = {}
    summaries = []
    for path in found.sessions:
        folder = path.parent
        workspace = workspaces.get(folder) or workspaces.setdefault(folder, Workspace(folder))
        try:
            summary = workspace.summary_of_path(path)
        except (LoopscribeError, OSError) as exc:
            out.stderr.print(
                f"skipped {path}: {exc}", highlight=False, markup=False, style="yellow"
            )
            continue
        if args.all or summary.parent_id is None:
            summaries.append(summary)
    summaries.sort(key=lambda s: (s.updated, s.id), reverse=True)
    if out.json:
        for summary in summaries:
            out.emit(summary_json(summary) | {"file": _relative(summary.path, root)})
        return 0
    if not summaries:
        if found.skipped:
            raise found.error(str(root))
        out.stderr.print(f"no sessions in {root}", style="dim", highlight=False)
        return 0
    width = short_id_width([s.id for s in summaries])
    # id, source, status and date never wrap; title (and file, when there is room) get the rest.
    room = out.stdout.width - (width + 11 + 11 + 16 + _COST_WIDTH) - 2 * 6
    wide = room >= 60
    title_room = max(8, room // 2 if wide else room)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("id", no_wrap=True, style="bold", min_width=width)
    table.add_column("title", no_wrap=True, overflow="ellipsis", max_width=title_room)
    table.add_column("source", no_wrap=True, overflow="ellipsis", min_width=6, max_width=11)
    table.add_column("status", no_wrap=True, min_width=11)
    table.add_column("last activity", no_wrap=True, min_width=16)
    table.add_column("cost", justify="right", no_wrap=True, min_width=_COST_WIDTH)
    if wide:
        table.add_column("file", no_wrap=True, overflow="ellipsis", max_width=room - title_room)
    for s in summaries:
        status = str(s.status)
        row = [
            s.id[:width],
            escape(" ".join((s.title or "").split())),
            escape(s.source or "loopscribe"),
            f"[{_COLOURS[status]}]{status}[/]" if status in _COLOURS else status,
            s.updated.astimezone().strftime("%Y-%m-%d %H:%M"),
            s.cost.text(),
        ]
        if wide:
            row.append(escape(_relative(s.path, root)))
        table.add_row(*row)
    out.stdout.print(table)
    return 0


def short_id_width(ids: list[str], least: int = 8) -> int:
    """How many leading characters tell these IDs apart (at least ``least``)."""
    ordered = sorted(ids)
    width = least
    for a, b in itertools.pairwise(ordered):
        common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
        width = max(width, common + 1)
    return width


def _relative(path: Path | str, root: Path) -> str:
    if isinstance(path, str):
        return path  # a shipped session's URL
    try:
        return str(path.absolute().relative_to(root.absolute()))
    except ValueError:
        return str(path)


def cmd_show(args: argparse.Namespace, out: Out) -> int:
    """Show a session's summary and its last messages."""
    from ..workspace import Workspace

    path, _seq = resolve_record(args.session, home_of(args))
    workspace = Workspace(path.parent)
    summary = workspace.summary_of_path(path)
    page = workspace.messages_of_path(path, last=args.last or 1_000_000_000)
    return show_page(summary, page, summary.status, out, path, args.last)


def show_page(
    summary: SessionSummary,
    page: MessagePage,
    status: str,
    out: Out,
    source: Path | str,
    last: int,
) -> int:
    """Print a session's summary line and its last messages and tool calls (or JSON)."""
    shown, total = last_entries(source, last)
    if out.json:
        out.emit(
            {
                "summary": summary_json(summary),
                "messages": page.messages,
                "has_more": page.has_more,
                "total": page.total,
                "transcript": [entry.to_json() for entry in shown],
                "transcript_total": total,
            }
        )
        return 0
    out.stdout.print(
        f"[bold]{escape(summary.title or summary.id)}[/]  {summary.id}  {status}  "
        f"model {escape(summary.model or '-')}  "
        f"{summary.message_count} messages  tokens {summary.input_tokens}/{summary.output_tokens}"
        f"  cost {summary.cost.text()}"
    )
    if total > len(shown):
        out.stdout.print(
            f"… {total - len(shown)} earlier messages and tool calls (--last N, or 0 for all)",
            style="dim",
        )
    for entry in shown:
        out.stdout.print(f"[bold cyan]{escape(entry.role)}[/]")
        out.stdout.print(entry.text, markup=False, highlight=False)
    return 0


def cmd_tail(args: argparse.Namespace, out: Out) -> int:
    """Print the last records of a session file, and with -f every new one."""
    from .._backread import tail_offset
    from ..live import follow

    path = resolve_session(args.session, home_of(args))
    stop = StopFlag()
    if args.follow:
        stop.install()
    else:
        stop.event.set()  # print what is there, then stop
    start = tail_offset(path, max(args.lines, 0))
    for record in follow(path, start, decode=not out.json, stop=stop.event):
        if out.json:
            out.emit(record_json(record))
            continue
        ex = record.execution
        where = f" {ex.kind} {ex.id}#{ex.attempt}" if ex else ""
        ts = record.ts.strftime("%H:%M:%S.%f")[:-3]
        out.stdout.print(
            f"{record.seq:>6} {ts} [bold]{escape(record.type)}[/]{escape(where)}", highlight=False
        )
        said = entry_of(record)
        if said is not None:
            out.stdout.print(indent(said.text, "       "), markup=False, highlight=False)
    return 0


# -- loopscribe verify ------------------------------------------------------------


def cmd_verify(args: argparse.Namespace, out: Out) -> int:
    """Check the hash chain of a session file."""
    from .._verify import verify

    return show_verify_report(verify(resolve_session(args.session, home_of(args))), out)


def show_verify_report(report: VerifyReport, out: Out) -> int:
    """Print what ``verify`` found (a line, or JSON); the exit status: 0 when intact."""
    if out.json:
        broken = report.broken
        out.emit(
            {
                "file": str(report.path),
                "records": report.records,
                "lines": report.lines,
                "chained": report.chained,
                "start_seq": report.start_seq,
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
        out.stdout.print(report.describe(), style=style, highlight=False, markup=False)
    # An unchained session has nothing to verify: reported, not a problem found.
    return 1 if report.broken is not None or (report.chained and not report.ok) else 0

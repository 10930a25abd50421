"""``loopscribe ls``, ``show``, ``tail`` and ``verify``: reading sessions in a terminal."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from rich.markup import escape
from rich.table import Table

from ._common import CliError, Out, StopFlag, record_json


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ls``, ``show``, ``tail`` and ``verify`` to the ``loopscribe`` parser."""
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
    from .._messages import TextContent, ToolCall

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
    from ..workspace import Workspace

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
    from ..workspace import Workspace

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
    from ..live import follow
    from ..workspace import tail_offset

    path = Path(args.file)
    stop = StopFlag()
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
    from .._verify import verify

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

"""``loopscribe ship``, and store URLs for ``ls``, ``show``, ``find`` and ``verify``.

The reading commands keep their own handlers for local paths; given a URL,
the handler installed here reads the store instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from .. import store as _store
from .._errors import StoreError
from .._format import is_session_id
from .._logsafe import display_url
from .._source import is_url
from ..store._layout import SEGMENT_BYTES
from ._find import find_records
from ._options import add_interval_option, parse_hex
from ._otel import show_found
from ._output import CliError, Out, StopFlag, UsageError
from ._resolve import parse_reference
from ._sessions import show_page, show_verify_report
from ._sessions import summary_json as _summary_json

if TYPE_CHECKING:
    from ..store import ShipResult

# The store package is reached through its module object: its names (and fsspec,
# the shipper, the workspace) are imported when a command uses them, so the
# other commands do not load them.

__all__ = ["add_parsers"]

Handler = Callable[[argparse.Namespace, Out], int]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ship``; let ``ls``, ``show``, ``find`` and ``verify`` take a store URL."""
    p = sub.add_parser(
        "ship",
        help="copy session files to object storage (any fsspec URL), incrementally",
        description=(
            "Copy the session files below DIR to a store: s3://bucket/prefix, gs://..., "
            "az://..., or a folder (file:///mnt/share). Each pass uploads only the complete "
            "lines added since the last one, as immutable segments plus a small manifest "
            "per session; a cursor beside each file (FILE.ship-cursor) makes passes "
            "resumable after a crash without uploading anything twice. Shippers of one "
            "session never fork its chain (each commit is a conditional write), and a pass "
            "repairs a chain that shippers of earlier versions broke. "
            "Needs: pip install 'loopscribe[store]'."
        ),
    )
    p.add_argument("dir", metavar="DIR", help="a folder of session files, or one file")
    p.add_argument("--to", required=True, metavar="URL", help="the store (an fsspec URL)")
    p.add_argument("--follow", "-f", action="store_true", help="keep shipping as files grow")
    add_interval_option(p, 5.0, "with --follow: the pause between passes")
    p.add_argument("--workers", type=int, default=8, metavar="N", help="sessions in parallel")
    p.add_argument(
        "--segment-mib",
        type=int,
        default=SEGMENT_BYTES >> 20,
        metavar="MIB",
        help="largest segment to upload",
    )
    p.set_defaults(handler=cmd_ship)
    for name, store_handler in (
        ("ls", cmd_ls),
        ("show", cmd_show),
        ("find", cmd_find),
        ("verify", cmd_verify),
    ):
        parser = sub.choices.get(name)
        if parser is not None:
            parser.set_defaults(handler=_either(parser.get_default("handler"), store_handler))


def _either(local: Handler, store: Handler) -> Handler:
    """The local handler for paths, the store's for URLs (the command's first argument)."""

    def handler(args: argparse.Namespace, out: Out) -> int:
        target = _target(args)
        if getattr(args, "genai_json", False):
            return local(args, out)  # follows a gen_ai.*_ref (file://...#seq=N) itself
        return store(args, out) if _is_store(target) else local(args, out)

    handler.__doc__ = local.__doc__
    return handler


def _is_store(target: Any) -> bool:
    """A store URL, not a local file's reference or a viewer link."""
    if not is_url(target):
        return False
    try:
        return parse_reference(target).url is not None
    except ValueError:
        return False  # a malformed viewer link: the local handler says what is wrong


def _target(args: argparse.Namespace) -> Any:
    """The command's folder, file or session argument."""
    for name in ("session", "file", "dir"):  # "dir" is also the --dir option of some
        value = getattr(args, name, None)
        if value is not None:
            return value
    return None


# -- ship ---------------------------------------------------------------------------


def cmd_ship(args: argparse.Namespace, out: Out) -> int:
    """Ship session files to a store, once or (``--follow``) until stopped."""
    if args.segment_mib < 1:
        raise CliError(f"--segment-mib must be at least 1, got {args.segment_mib}")
    shipper = _store.Shipper(
        args.dir, args.to, workers=args.workers, segment_bytes=args.segment_mib << 20
    )
    stop = StopFlag()
    if args.follow:
        stop.install()

    def report(result: ShipResult) -> None:
        if out.json:
            out.emit(result.to_json())
        elif result.shipped or not args.follow:
            out.stdout.print(
                f"{result.sessions} session(s), {result.shipped} shipped: "
                f"{result.records} records in {result.segments} segment(s), "
                f"{result.bytes_uploaded} bytes uploaded"
                + (
                    f", {result.adopted} segment(s) of an interrupted pass kept"
                    if result.adopted
                    else ""
                )
                + (f", {result.repaired} session(s) repaired" if result.repaired else "")
                + f" → {shipper.url}",
                highlight=False,
                markup=False,
            )
        for error in result.errors:
            out.stderr.print(
                f"loopscribe: error: {error}", highlight=False, markup=False, style="red"
            )

    total = shipper.run(
        follow=args.follow, interval_s=args.interval, stop=stop.event, on_pass=report
    )
    return 1 if total.errors else 0


# -- ls / show / find / verify on a store -----------------------------------------


def _workspace(url: str) -> Any:
    from ..workspace import Workspace

    return Workspace(url)


def _warn(out: Out, problems: tuple[str, ...]) -> None:
    """One line on stderr per object of the store that could not be read."""
    for problem in problems:
        out.stderr.print(
            f"loopscribe: warning: {problem}", highlight=False, markup=False, style="yellow"
        )


def cmd_ls(args: argparse.Namespace, out: Out) -> int:
    """List the sessions of a store, newest first; say which objects could not be read."""
    workspace = _workspace(args.dir)
    summaries = workspace.list(include_children=args.all)
    status = 1 if workspace.problems else 0
    if out.json:
        for summary in summaries:
            out.emit(_summary_json(summary))
        _warn(out, workspace.problems)
        return status
    table = Table("session", "title", "status", "model", "msgs", "tokens in/out", "updated")
    for s in summaries:
        table.add_row(
            s.id[:12],
            escape(s.title or ""),
            s.status,
            escape(s.model or ""),
            str(s.message_count),
            f"{s.input_tokens}/{s.output_tokens}",
            s.updated.strftime("%Y-%m-%d %H:%M:%S"),
        )
    out.stdout.print(table)
    if not summaries:
        out.stderr.print(
            f"no sessions in {display_url(args.dir)}", style="dim", highlight=False, markup=False
        )
    _warn(out, workspace.problems)
    return status


def cmd_show(args: argparse.Namespace, out: Out) -> int:
    """Show a shipped session's summary and last messages (URL or span reference)."""
    store_url, sid, _seq = _session(_target(args))
    workspace = _workspace(store_url)
    summary = workspace.get(sid)
    page = workspace.messages(sid, last=args.last or 1_000_000_000)
    source = _store.Store(store_url).session_url(sid)
    return show_page(summary, page, f"{summary.status} (when shipped)", out, source, args.last)


def _session(url: str) -> tuple[str, str, int | None]:
    try:
        return _store.parse_session_url(url)
    except StoreError as exc:
        raise CliError(str(exc)) from None


def cmd_find(args: argparse.Namespace, out: Out) -> int:
    """Print the records behind a trace or span, reading the store.

    Only the sessions whose manifest lists a run of the trace are read.
    """
    if args.trace_id is None:
        raise UsageError("find in a store needs --trace-id (and --span-id)")
    trace = parse_hex(args.trace_id, 128, "trace id")
    span = None if args.span_id is None else parse_hex(args.span_id, 64, "span id")
    url = args.dir.split("#", 1)[0].rstrip("/")
    tail = url.rsplit("/", 1)[-1]
    urls: list[Any]  # session URLs: read() takes them where find_records names a Path
    if is_session_id(tail) and url.rsplit("/", 2)[-2] == "sessions":
        store_url, sid, _seq = _session(url)
        urls = [_store.Store(store_url).session_url(sid)]  # shown without credentials
        searched = 1
    else:
        store = _store.Store(url)
        manifests = store.manifests()
        _warn(out, store.problems)
        searched = len(manifests)
        wanted = f"{trace:032x}"
        urls = [store.session_url(m.session_id) for m in manifests if wanted in m.runs.values()]
    args.dir = display_url(args.dir)  # what an error names from here on
    return show_found(
        find_records(urls, trace, span, out),
        args,
        out,
        heading=lambda where, record: (record.session_id, str(where)),
        searched=f"{searched} shipped sessions searched",
    )


def cmd_verify(args: argparse.Namespace, out: Out) -> int:
    """Check the hash chain of a shipped session, across its segments."""
    from .._verify import verify

    store_url, sid, _seq = _session(_target(args))
    return show_verify_report(verify(_store.Store(store_url).session_url(sid)), out)

"""``loopscribe serve``, ``loopscribe report`` and ``loopscribe stats``.

``serve`` needs the optional web framework (``pip install 'loopscribe[serve]'``)
and imports it only when it runs; ``report`` and ``stats`` need nothing extra.
``python -m loopscribe.viewer`` runs the three on their own.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._logsafe import display_url, hide, url_secrets
from .._source import is_url
from .._stats import DEFAULT_TOP, SessionStats, many_stats, stats_size
from ._find import resolve_session, resolve_targets
from ._options import (
    SESSION_HELP,
    add_interval_option,
    command_parser,
    count,
    home_of,
    parse,
    share_options,
)
from ._output import CliError, NotFoundError, Out, extra_hint, run
from ._tables import print_in_parts, short_count

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..viewer import Catalog

__all__ = ["DEFAULT_PORT", "StoreSync", "add_parsers", "main", "serve_app"]

logger = logging.getLogger("loopscribe")

DEFAULT_PORT = 8765
"""Where ``loopscribe serve`` listens unless told otherwise (the collector configs link here)."""


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0 picks a free one)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (0 to 65535)")
    return number


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve``, ``report`` and ``stats`` to the ``loopscribe`` parser."""
    p = sub.add_parser(
        "serve",
        help="a read-only web viewer of a folder of sessions (run timelines, bodies)",
        description=(
            "Serve a read-only web viewer of the session files below DIR: the sessions, "
            "their runs, each run's timeline, and the records behind every bar. "
            "Trace backends link to /trace/TRACE_ID/span/SPAN_ID. Listens on 127.0.0.1 "
            f"unless --host says otherwise. Needs the web framework: {extra_hint('serve')}"
        ),
    )
    p.add_argument(
        "dir",
        nargs="?",
        default=None,
        metavar="DIR",
        help="a folder of sessions (searched recursively), one file, or a store URL "
        "(default: the sessions home)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; anything else exposes the bodies)",
    )
    p.add_argument(
        "--port",
        type=port,
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0 picks a free one and prints it)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help=(
            "a Host header to answer besides the loopback names and the bound address "
            "(repeat it; for --host 0.0.0.0, the name clients use). Others get 400, "
            "which stops DNS rebinding"
        ),
    )
    p.add_argument("--open", action="store_true", help="open the viewer in a web browser")
    add_interval_option(p, 10.0, "with a store URL: how often to fetch newly shipped records")
    p.set_defaults(handler=cmd_serve)

    p = sub.add_parser(
        "report",
        help="a session's run timelines as one self-contained HTML file",
        description=(
            "Write the run timelines of a session file, with the records behind every bar, "
            "as one HTML file that needs no server and no network: attach it to a bug report."
        ),
    )
    p.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    p.add_argument(
        "-o",
        "--output",
        metavar="HTML",
        help="where to write the report (default: the session file's name with .report.html, "
        "in the current folder)",
    )
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_ID",
        help="only this run (repeatable; default: every run)",
    )
    p.add_argument(
        "--full", action="store_true", help="keep every body whole (default: cut long strings)"
    )
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser(
        "stats",
        help="per session and run: duration, calls, errors, retries, tokens, slowest",
        description=(
            "Per session and run: duration, model calls, tool calls, errors, retries, "
            "tokens by model and the slowest executions."
        ),
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="SESSION",
        help="session files, folders (searched recursively) or session IDs, shown in this order "
        "(default: the sessions home)",
    )
    p.add_argument(
        "--top",
        type=count,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"slowest executions kept per run, and shown per session (default {DEFAULT_TOP})",
    )
    p.set_defaults(handler=cmd_stats)


# -- formatting ----------------------------------------------------------------------


def duration(us: int) -> str:
    """Microseconds as a short human duration."""
    if us < 1_000:
        return f"{us} µs"
    if us < 1_000_000:
        return f"{us / 1000:.1f} ms"
    if us < 60_000_000:
        return f"{us / 1e6:.2f} s"
    if us < 3_600_000_000:
        minutes, rest = divmod(us, 60_000_000)
        return f"{minutes} m {rest // 1_000_000} s"
    hours, rest = divmod(us, 3_600_000_000)
    return f"{hours} h {rest // 60_000_000} m"


_STATE_STYLE = {"ok": "green", "error": "red", "open": "yellow", "incomplete": "yellow"}


def _count(n: int, bad: bool = False) -> str:
    return f"[red]{n}[/]" if bad and n else str(n)


# -- serve ------------------------------------------------------------------------------


def allowed_hosts(bound: str, extra: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ``Host`` names the viewer answers: loopback, the bound address, and ``extra``.

    Always a list, even on ``0.0.0.0``: a page on another site can make a
    browser send requests here under its own name (DNS rebinding).
    """
    from ..viewer import LOOPBACK_HOSTS

    bare = bound.strip("[]")
    names = [*LOOPBACK_HOSTS, *extra]
    if bare not in ("0.0.0.0", "::"):
        names += [bare, f"[{bare}]"] if ":" in bare else [bare]
    return tuple(dict.fromkeys(names))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, made as ``socket.create_server`` makes it, but TCP by name.

    asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only on a socket whose
    protocol says TCP, and the connections accepted here take this socket's
    protocol (``create_server`` leaves it 0). With Nagle on, a response written
    in two parts waits for the browser's delayed ACK: about 40 ms for every
    request after the first on a kept-alive connection (every script module,
    every poll of a live run).
    """
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if os.name != "nt":  # as create_server: rebind at once after a restart
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((bare, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        hint = " (it is in use; pick another with --port, or --port 0)" if port else ""
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    return sock


class StoreSync:
    """Keeps a store's local copy current on a daemon thread; no failure stops it.

    Each pass is ``mirror.sync()``. Whatever a pass raises is logged (once
    while it stays the same) and shown on every page until a pass succeeds;
    the next pass comes ``interval_s`` later all the same. What a pass could
    not copy (a damaged object) is the mirror's own ``problems``.

    Args:
        mirror: A :class:`~loopscribe.store._mirror.Mirror` (anything with ``sync()``).
        interval_s: Seconds between the end of a pass and the next.
        stop: Set to end the thread after the pass under way.
        after_pass: Called after every pass (the viewer indexes what it fetched).
        url: The store's URL as given: its credentials are taken out of every
            line :meth:`problems` reports (a backend's error may quote them).
    """

    def __init__(
        self,
        mirror: Any,
        interval_s: float,
        stop: threading.Event,
        after_pass: Callable[[], None] | None = None,
        *,
        url: str = "",
    ) -> None:
        self.mirror = mirror
        self.interval_s = interval_s
        self.stop = stop
        self.after_pass = after_pass
        self.first_pass = threading.Event()
        """Set once the first pass ended, whether it copied everything or failed."""
        self.passes = 0
        self._failure: tuple[str, ...] = ()
        self._secrets = url_secrets(url)

    def _clean(self, text: str) -> str:
        return hide(text, self._secrets)

    def problems(self) -> tuple[str, ...]:
        """The failure of the last pass, if it failed, then what it could not copy."""
        # getattr: a mirror without per-object problems only fails as a whole.
        return (*self._failure, *map(self._clean, getattr(self.mirror, "problems", ())))

    def sync_once(self) -> None:
        """One pass; never raises."""
        try:
            self.mirror.sync()
        except Exception as exc:  # every failure is reported and retried, none ends the loop
            # One line: a backend's error may run over several (botocore's do).
            message = self._clean(
                f"syncing the store's copy failed (retried every {self.interval_s:g} s): "
                f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            )
            if self._failure != (message,):
                logger.warning("%s", message)
            self._failure = (message,)
        else:
            self._failure = ()
        self.passes += 1
        self.first_pass.set()
        if self.after_pass is not None:
            try:
                self.after_pass()
            except Exception:  # the viewer's own hook: logged, the syncing goes on
                logger.exception("after syncing the store's copy")

    def run(self) -> None:
        """Pass after pass until :attr:`stop` is set."""
        while True:
            self.sync_once()
            if self.stop.wait(self.interval_s):
                return

    def start(self) -> threading.Thread:
        """Run :meth:`run` on a daemon thread."""
        thread = threading.Thread(target=self.run, name="loopscribe-store-sync", daemon=True)
        thread.start()
        return thread


def store_name(mirror: Any, url: str) -> str:
    """The store ``serve`` names: the mirror's URL, which carries no credentials, or else
    ``url`` without its user info and secret query values."""
    shown = getattr(mirror, "url", None)
    return shown if isinstance(shown, str) else display_url(url)


def serve_app(args: argparse.Namespace, out: Out, bound: str) -> tuple[Starlette, Catalog]:
    """The viewer ``serve`` runs, for ``args.dir`` (a folder, a file or a store URL).

    Indexing, and a store's sync, go on in the background: the application
    answers at once. A store is served from a local copy (see
    :class:`StoreSync`) whose problems every page shows.
    """
    from ..viewer import Catalog, NotFoundError
    from ..viewer._app import create_app

    sync: StoreSync | None = None
    store = ""
    if is_url(args.dir):
        from ..store._mirror import Mirror

        mirror = Mirror(args.dir)
        store = store_name(mirror, args.dir)
        root = mirror.cache
        sync = StoreSync(mirror, args.interval, threading.Event(), url=args.dir)
    else:
        root = Path(args.dir)
    try:
        catalog = Catalog(root, ready=None if sync is None else sync.first_pass)
    except NotFoundError as exc:
        raise CliError(str(exc)) from None
    problems = None
    if sync is not None:
        sync.after_pass = catalog.start
        problems = sync.problems
        sync.start()
        out.stderr.print(
            f"fetching the sessions of {store} into {root} in the background "
            f"(every {args.interval:g} s)",
            style="dim",
            highlight=False,
            markup=False,
        )
    app = create_app(
        root,
        catalog=catalog,
        allowed_hosts=allowed_hosts(bound, args.allow_host),
        problems=problems,
    )
    return app, catalog


def cmd_serve(args: argparse.Namespace, out: Out) -> int:
    """Serve the viewer until Ctrl-C or SIGTERM."""
    missing = [m for m in ("starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(
            f"`loopscribe serve` needs the web framework ({' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed): {extra_hint('serve')}"
        )
    import uvicorn

    if args.dir is None:
        args.dir = str(home_of(args))
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    if not is_url(args.dir) and not Path(args.dir).exists():
        raise CliError(f"{Path(args.dir).absolute()}: no such folder or session file")
    loopback = _is_loopback(args.host)
    if not loopback:
        out.stderr.print(
            f"warning: listening on {args.host}: anyone who can reach it reads every prompt, "
            "message and tool output in these sessions",
            style="yellow",
            highlight=False,
            markup=False,
        )
    sock = _listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    try:
        app, catalog = serve_app(args, out, host)
    except BaseException:
        sock.close()
        raise
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    if out.json:
        out.emit({"url": url, "root": str(catalog.root)})
    else:
        out.stdout.print(
            f"loopscribe viewer on {url} — {catalog.root}, indexed in the background "
            "(read-only; Ctrl-C stops it)",
            highlight=False,
            markup=False,
        )
    sys.stdout.flush()
    if args.open:
        import webbrowser  # only for --open: it loads subprocess and shutil

        webbrowser.open(url)
    verbose = logging.getLogger().isEnabledFor(logging.INFO)
    config = uvicorn.Config(
        app,
        log_level="info" if verbose else "warning",
        access_log=verbose,
        lifespan="off",
        server_header=False,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


# -- report --------------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace, out: Out) -> int:
    """Write a self-contained HTML report of a session file."""
    from ..viewer import write_report

    path = resolve_session(args.session, home_of(args))
    target = Path(args.output) if args.output else Path(path.name).with_suffix(".report.html")
    if not target.parent.is_dir():
        raise NotFoundError(
            f"{target}: the folder {target.parent} does not exist; create it, or give another -o"
        )
    if target.resolve() == path.resolve():
        raise CliError(f"{target}: that is the session file; choose another --output")
    total = stats_size(path)
    with out.progress(total) as bar:
        task = bar.add_task(path.name, total=total)
        try:
            written = write_report(
                path,
                target,
                run_ids=tuple(args.run),
                full=args.full,
                on_progress=lambda offset: bar.update(task, completed=offset),
            )
        except LookupError as exc:
            raise CliError(str(exc).strip("'\"")) from None
    size = written.stat().st_size
    if out.json:
        out.emit({"file": str(path), "report": str(written), "bytes": size})
    else:
        out.stdout.print(
            f"report written to {written} ({size:,} bytes)", highlight=False, markup=False
        )
    return 0


# -- stats -------------------------------------------------------------------------------------


def cmd_stats(args: argparse.Namespace, out: Out) -> int:
    """Print per-session and per-run statistics."""
    found = resolve_targets(args.paths or [str(home_of(args))], home_of(args))
    files = found.sessions
    if not files:
        raise found.error(", ".join(args.paths))
    results: list[SessionStats] = []
    total = sum(stats_size(p) for p in files)
    with out.progress(total) as bar:
        task = bar.add_task("reading", total=total)
        for item in many_stats(
            files, top=args.top, on_file=lambda _p, size: bar.advance(task, size)
        ):
            if isinstance(item, SessionStats):
                results.append(item)
                if out.json:
                    out.emit_parts(item.json_parts())
                continue
            path, exc = item
            out.stderr.print(
                f"skipped {path}: {exc}", style="yellow", highlight=False, markup=False
            )
    if not results:
        raise CliError(f"none of the {len(files)} file(s) could be read as a session")
    if not out.json:
        _print_stats(out.stdout, results, args.top)
    return 0


def _session_name(s: SessionStats) -> str:
    return s.title or s.session_id[:12]


def _print_stats(console: Console, results: list[SessionStats], top: int) -> None:
    for number, s in enumerate(results):
        if number:
            console.print()
        # Wrapped at the terminal's width, unlike the rest of the output (soft_wrap).
        console.print(f"[bold]{escape(_session_name(s))}[/]", highlight=False, soft_wrap=False)
        console.print(
            f"session {s.session_id} · {len(s.runs)} run(s) · {s.records} records · "
            f"{escape(str(s.path))}",
            style="dim",
            highlight=False,
            soft_wrap=False,
        )
        if not s.runs:
            console.print("no runs", style="dim")
            continue
        runs = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        runs.add_column("run", no_wrap=True, min_width=8)
        runs.add_column("agent", overflow="ellipsis", no_wrap=True)
        runs.add_column("state", no_wrap=True, min_width=5)
        runs.add_column("duration", justify="right", no_wrap=True)
        for column in (
            "model\ncalls",
            "tool\ncalls",
            "errors/\nretries",
            "tokens\nin/out",
            "cost",
        ):
            runs.add_column(column, justify="right", no_wrap=True)
        for r in s.runs:
            runs.add_row(
                r.run_id[:8],
                escape(r.agent or ""),
                f"[{_STATE_STYLE.get(r.state, '')}]{r.state}[/]",
                duration(r.duration_us) if r.duration_us else "-",
                str(r.model_calls),
                str(r.tool_calls),
                f"{_count(r.errors, bad=True)}/{_count(r.retries, bad=True)}",
                f"{short_count(r.input_tokens)}/{short_count(r.output_tokens)}",
                r.cost.text(),
            )
        print_in_parts(console, runs)
        by_model = s.tokens_by_model()
        if by_model:
            tokens = Table(
                "model",
                box=box.SIMPLE_HEAD,
                show_edge=False,
                pad_edge=False,
                title="tokens by model",
                title_justify="left",
            )
            for column in ("calls", "input tokens", "output tokens", "cost"):
                tokens.add_column(column, justify="right", no_wrap=True)
            for t in by_model:
                tokens.add_row(
                    escape(t.model),
                    str(t.calls),
                    f"{t.input_tokens:,}",
                    f"{t.output_tokens:,}",
                    t.cost.text(),
                )
            console.print(tokens)
        slow = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            title="slowest executions",
            title_justify="left",
        )
        slow.add_column("run", no_wrap=True)
        slow.add_column("execution")
        slow.add_column("attempt", justify="right", no_wrap=True)
        slow.add_column("state", no_wrap=True)
        slow.add_column("duration", justify="right", no_wrap=True)
        slow.add_column("seq", justify="right", no_wrap=True)
        ranked = sorted(
            ((r, e) for r in s.runs for e in r.slowest), key=lambda pair: -pair[1].duration_us
        )
        for r, e in ranked[:top]:
            slow.add_row(
                r.run_id[:8],
                f"{escape(e.name)} [dim]{escape(e.execution_id)}[/]",
                str(e.attempt),
                f"[{_STATE_STYLE.get(e.state, '')}]{e.state}[/]",
                duration(e.duration_us),
                str(e.first_seq),
            )
        if slow.row_count:
            console.print(slow)
        untimed = sum(r.untimed for r in s.runs)
        if untimed:
            console.print(
                f"{untimed} execution(s) without a duration (start and end at one instant) "
                "are counted above, not ranked",
                style="dim",
                highlight=False,
                soft_wrap=False,  # wrapped at words to the terminal's width
            )


# -- python -m loopscribe.viewer ----------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m loopscribe.viewer serve|report|stats ...``; returns the exit status."""
    parser = command_parser(
        "python -m loopscribe.viewer", "The loopscribe web viewer, HTML report and statistics."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_parsers(sub)
    share_options(parser)
    args = parse(parser, argv)
    return args if isinstance(args, int) else run(args)

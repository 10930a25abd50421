"""What every ``loopscribe`` command shares: output, errors, files, options.

Output follows the ecosystem's habits: tables and colour only on a terminal,
``--json`` for scripts, progress bars on stderr for long work, errors as one
line on stderr with exit status 1 (2 for usage errors).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import sys
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import orjson
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

from .._errors import LoopscribeError
from .._home import sessions_home
from .._logsafe import install as install_log_filter
from .._model import Record
from .._safeopen import not_a_session_file
from ._kinds import AGENT_LABELS, candidate_files, describe, file_kind
from ._resolve import parse_reference
from ._terminal import DescriptionColumn, PrintableFormatter, SafeConsole

SESSION_HELP = (
    "a session ID or unique ID prefix (looked up in the sessions home, or --dir), a session "
    "file, a record reference (file:///…#seq=N), a viewer link or TRACE_ID/SPAN_ID"
)

REF_BASE_HELP = (
    "where span references point instead of the local file: the store URL sessions are "
    "shipped to (s3://bucket/prefix), or a viewer URL template with {session_id} and {seq}; "
    "default $LOOPSCRIBE_REF_BASE"
)
PROGRESS_MIN_BYTES = 8 << 20
"""Files smaller than this get no progress bar."""


class CliError(LoopscribeError):
    """A failure to report as one line on stderr, with exit status 1."""

    exit_status = 1


class NotFoundError(CliError):
    """No such file, session, record or span: exit status 3."""

    exit_status = 3


class UsageError(CliError):
    """The arguments do not make sense together: exit status 2, as a parsing error."""

    exit_status = 2


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
            DescriptionColumn(),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=self.stderr,
            transient=True,
            disable=total < PROGRESS_MIN_BYTES or not self.stderr.is_terminal,
        )


@dataclass(slots=True)
class Found:
    """The sessions below some paths, and what was skipped there."""

    sessions: list[Path] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    unreadable: list[tuple[Path, OSError]] = field(default_factory=list)
    """Files and folders that could not be read, with why (also counted in ``skipped``)."""

    def report_unreadable(self, out: Out) -> None:
        """Name each file or folder that could not be read, one line each on stderr."""
        for path, exc in self.unreadable:
            hint = "; check its permissions" if isinstance(exc, PermissionError) else ""
            out.stderr.print(
                f"skipped {path}: cannot read it ({exc.strerror or exc}){hint}",
                highlight=False,
                markup=False,
                style="yellow",
            )

    def error(self, where: str) -> CliError:
        """ "No sessions here", saying what was found instead and what to do with it."""
        message = f"no loopscribe sessions in {where}"
        foreign = [(AGENT_LABELS[k], k) for k in AGENT_LABELS if self.skipped[k]]
        if foreign:
            listed = " and ".join(
                f"{self.skipped[k]} {label} transcript(s)" for label, k in foreign
            )
            how = " or ".join(f"`loopscribe import {k} {where}`" for _, k in foreign)
            message += f"; it holds {listed}: import them with {how}"
        elif self.skipped:
            message += f" ({self.skipped.total()} other file(s) skipped)"
        return CliError(message)


BYPRODUCTS = frozenset({"spans", "cursor", "artifact", "report"})
"""What loopscribe writes beside a session: skipped even when named."""


def find_sessions(root: Path, found: Found | None = None) -> Found:
    """The session files named by ``root``: itself, or every session file below it.

    A folder is searched recursively; what is not a session (exported spans,
    cursors, artifacts, reports, other JSON lines) is skipped and counted, not
    called damaged. A file named on purpose must be a session.

    Raises:
        CliError: ``root`` does not exist, or is a file but not a session.
    """
    found = found if found is not None else Found()
    if root.is_file():
        kind = file_kind(root)
        if not kind.is_session:
            raise CliError(describe(root, kind))
        found.sessions.append(root)
        return found
    if not root.is_dir():
        if root.exists():
            raise CliError(not_a_session_file(root))
        raise NotFoundError(f"{root}: no such file or folder")
    refuse_whole_tree(root)
    errors: list[OSError] = []
    for path in candidate_files(root, errors):
        try:
            kind = file_kind(path)
        except OSError as exc:
            errors.append(exc if exc.filename else OSError(exc.errno, exc.strerror, str(path)))
            continue
        if kind.is_session:
            found.sessions.append(path)
        else:
            found.skipped[kind.kind] += 1
    for error in errors:
        found.skipped["unreadable"] += 1
        found.unreadable.append((Path(error.filename), error))
    return found


def refuse_whole_tree(root: Path) -> None:
    """Refuse to search ``/`` or the home folder for sessions: it reads every file there.

    Raises:
        CliError: ``root`` is one of them (and not the sessions home itself).
    """
    resolved = root.resolve()
    home = Path.home().resolve()
    if resolved in (resolved.parent, home):
        if resolved == sessions_home().resolve():
            return
        what = "the whole file system" if resolved == resolved.parent else "your home folder"
        raise CliError(
            f"{root}: is {what}; searching every file below it for sessions takes minutes. "
            f"Name the folder that holds them (the sessions home is {sessions_home()})"
        )


def session_files(root: Path) -> list[Path]:
    """The session files named by ``root`` (see :func:`find_sessions`)."""
    return find_sessions(root).sessions


def looks_like_id(text: str) -> bool:
    """Could ``text`` be a session ID or the start of one (hex digits)?"""
    return 0 < len(text) <= 32 and all(c in "0123456789abcdef" for c in text.lower())


def home_of(args: argparse.Namespace) -> Path:
    """The sessions home of a command: ``--dir``, else :func:`loopscribe.sessions_home`."""
    given = getattr(args, "home", None)
    return Path(given) if given else sessions_home()


def resolve_session(target: str, base: Path) -> Path:
    """The session file ``target`` names, in any form :mod:`._resolve` knows.

    IDs, prefixes and spans are looked up in the session files below ``base``.

    Raises:
        CliError: Not a session, or an ambiguous prefix.
        NotFoundError: No such file, session or span.
    """
    return resolve_record(target, base)[0]


def resolve_record(target: str, base: Path) -> tuple[Path, int | None]:
    """The session file ``target`` names, and the record (seq) it points at, if any.

    Raises:
        CliError: Not a session, or an ambiguous prefix.
        NotFoundError: No such file, session or span.
    """
    try:
        ref = parse_reference(target)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if ref.url is not None:
        raise CliError(
            f"{target}: a store URL; this command reads local sessions (`loopscribe ls URL`, "
            "`show`, `find` and `verify` read a store)"
        )
    if ref.is_span:
        assert ref.trace_id is not None
        return locate_span(base, ref.trace_id, ref.span_id, target)
    if ref.session is not None:
        path = _by_id(ref.session, target, base)
        if ref.span_id is not None and ref.seq is None:
            return locate_span(path, None, ref.span_id, target)
        return path, ref.seq
    assert ref.path is not None
    path = ref.path
    if path.exists() and not path.is_file() and not path.is_dir():
        raise CliError(not_a_session_file(path))  # a FIFO, a device, a socket
    if path.is_file():
        kind = file_kind(path)
        if not kind.is_session:
            raise CliError(describe(path, kind))
        return path, ref.seq
    if path.is_dir():
        if looks_like_id(target) and base.is_dir():
            try:  # a folder named like a prefix ("a3", "0b") in the current one
                return _by_id(target.lower(), target, base), None
            except CliError:
                pass
        raise _is_a_folder(path, target)
    if ref.seq is not None:
        raise NotFoundError(f"{path}: no such session file (the reference {target!r} names it)")
    named = _by_name(target, base)
    if named is not None:
        return named, None
    raise NotFoundError(
        f"{target}: no such file, and not a session ID, a record reference "
        "(file:///…#seq=N, a viewer link) or TRACE_ID/SPAN_ID"
    )


def _by_name(name: str, base: Path) -> Path | None:
    """The one session file named ``name`` (or ``name.jsonl``) below ``base``, if any."""
    if not name or "/" in name or os.sep in name or not base.is_dir():
        return None
    wanted = {name, f"{name}.jsonl"}
    found = [p for p in candidate_files(base) if p.name in wanted]
    if len(found) > 1:
        listed = ", ".join(str(p) for p in found[:5])
        raise CliError(f"{name}: {len(found)} session files have that name ({listed}); give one")
    if found and file_kind(found[0]).is_session:
        return found[0]
    return None


def _by_id(prefix: str, target: str, base: Path) -> Path:
    """The session whose ID (or imported transcript's ID) starts with ``prefix``, below ``base``."""
    if not base.is_dir():
        raise NotFoundError(
            f"{target}: no such file; looked for a session ID in {base}: no such folder "
            "(import or record sessions there first, or give --dir)"
        )
    matches: dict[str, list[Path]] = {}
    for candidate in candidate_files(base):
        try:
            kind = file_kind(candidate)
        except OSError:
            continue
        if kind.session_id is None:
            continue
        source = kind.source_id or ""
        if kind.session_id.startswith(prefix) or (
            len(prefix) >= 4
            and (
                source.startswith(prefix)
                or source.replace("-", "").startswith(prefix.replace("-", ""))
            )
        ):
            matches.setdefault(kind.session_id, []).append(candidate)
    if not matches:
        raise NotFoundError(
            f"{target}: no such file, and no session ID starting with it in {base} "
            "(--dir says where to look)"
        )
    if len(matches) > 1:
        listed = ", ".join(sorted(matches)[:5])
        more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
        raise CliError(
            f"{target}: {len(matches)} sessions start with it in {base} ({listed}{more}); "
            "give more digits"
        )
    [(session_id, paths)] = matches.items()
    if len(paths) > 1:
        listed = ", ".join(str(p) for p in paths)
        raise CliError(f"{target}: session {session_id} is in {len(paths)} files: {listed}")
    return paths[0]


def locate_span(
    where: Path, trace: int | None, span: int | None, target: str
) -> tuple[Path, int | None]:
    """The session file (below ``where``, or ``where`` itself) and first record of a span.

    ``trace`` ``None`` matches any trace (a span ID within one session).

    Raises:
        NotFoundError: No session below ``where`` has it.
    """
    files = [where] if where.is_file() else find_sessions(where).sessions
    for path in files:
        try:
            for record, run_trace, ids in _spanned(path):
                if trace is not None and run_trace != trace:
                    continue
                if span is None or (ids is not None and ids[1] == span):
                    return path, record.seq
        except (LoopscribeError, OSError):
            continue
    raise NotFoundError(f"{target}: no session below {where} holds that span")


def _is_a_folder(path: Path, target: str) -> CliError:
    return CliError(
        f"{path}: is a folder; give one session file or session ID "
        f"(`loopscribe ls {shlex.quote(target)}` lists them)"
    )


def resolve_targets(targets: Sequence[str], base: Path) -> Found:
    """Session files from files, folders (searched recursively) and session IDs, in order.

    Span files, cursors, artifacts and reports named among them are skipped:
    a glob such as ``sessions/*`` names them beside their sessions.
    """
    found = Found()
    for target in targets:
        path = Path(target)
        if path.is_file() and (kind := file_kind(path).kind) in BYPRODUCTS:
            found.skipped[kind] += 1  # a glob over a folder names these too
        elif path.exists():
            find_sessions(path, found)
        else:
            found.sessions.append(resolve_session(target, base))
    unique: dict[Path, Path] = {}
    for path in found.sessions:
        unique.setdefault(path.resolve(), path)
    found.sessions = list(unique.values())
    return found


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


class StopFlag:
    """Set by SIGINT/SIGTERM so a follower flushes and saves its cursor before exiting."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.event.set()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)


# -- parsing and running ---------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative; give 0 or more")
    return number


def seconds(text: str) -> float:
    """An argparse type: a duration in seconds, 0 or more."""
    try:
        number = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} seconds: give a finite number, 0 or more")
    return number


_OLD_INTERVAL_NAMES = ("--poll-interval", "--sync-interval")
"""What ``--interval`` was called by some commands: accepted, not listed (for one release)."""


def add_interval_option(parser: argparse.ArgumentParser, default: float, what: str) -> None:
    """``--interval SECONDS``: the one name of every polling period (old names hidden)."""
    parser.add_argument(
        "--interval",
        type=seconds,
        default=default,
        metavar="SECONDS",
        help=f"{what} (default {default:g})",
    )
    parser.add_argument(*_OLD_INTERVAL_NAMES, dest="interval", type=seconds, help=argparse.SUPPRESS)


def _add_shared(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--dir",
        dest="home",
        default=None if default is False else default,
        metavar="DIR",
        help="the sessions home: where session IDs, prefixes and spans are looked up and "
        "what ls, serve and find read by default (default $LOOPSCRIBE_DIR, else "
        "$XDG_DATA_HOME/loopscribe or ~/.local/share/loopscribe)",
    )
    parser.add_argument(
        "--json", action="store_true", default=default, help="machine-readable JSON lines output"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=default, help="log progress details"
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help="show the traceback of an error, and of errors logged on the way",
    )


def share_options(parser: argparse.ArgumentParser) -> None:
    """Accept ``--dir``, ``--json``, ``-v`` and ``--debug`` after every subcommand too."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                # SUPPRESS: absent after the subcommand, the value given before it stands.
                _add_shared(sub, argparse.SUPPRESS)
                share_options(sub)


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with the shared options: ``--dir``, ``--json``, ``-v``, ``--debug``, ``--version``.

    Call :func:`share_options` once its subcommands are added.
    """
    parser = Parser(prog=prog, description=description)
    _add_shared(parser, False)
    parser.add_argument(
        "--version", action="version", version=f"loopscribe {version()}", help="print the version"
    )
    return parser


def extra_hint(extra: str) -> str:
    """The command that installs an optional extra, for this installation.

    From a source checkout (an editable install) that is ``pip install -e``
    of the checkout; otherwise the package from an index.
    """
    import importlib.metadata

    pip = f"{Path(sys.executable).parent / 'pip'}" if sys.prefix != sys.base_prefix else "pip"
    try:
        direct = importlib.metadata.distribution("loopscribe").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        direct = None
    if direct:
        info = orjson.loads(direct)
        url = info.get("url", "")
        if info.get("dir_info", {}).get("editable") and url.startswith("file://"):
            root = Path(url.removeprefix("file://"))
            return f"{pip} install -e {shlex.quote(f'{root}[{extra}]')}"
    return f"{pip} install 'loopscribe[{extra}]'"


def version() -> str:
    """The installed loopscribe's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("loopscribe")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree, not installed
        from .. import __version__

        return __version__


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parse ``argv``: the namespace, or the exit status of --help, --version or an error."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def run(args: argparse.Namespace) -> int:
    """Run a parsed command (from :func:`command_parser`); returns the exit status.

    Any error ends the command with one line on stderr and exit status 1;
    ``--debug`` prints its traceback first.
    """
    out = Out(SafeConsole(soft_wrap=True), SafeConsole(stderr=True, soft_wrap=True), args.json)
    handler: Callable[[argparse.Namespace, Out], int] = args.handler
    debug = bool(getattr(args, "debug", False))
    try:
        with _logging(verbose=args.verbose, debug=debug):
            return handler(args, out)
    except BrokenPipeError:  # pragma: no cover - e.g. `loopscribe find ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        out.stderr.print("loopscribe: interrupted", highlight=False, markup=False, style="red")
        return 130
    except Exception as exc:
        if debug:
            traceback.print_exc()
        out.stderr.print(
            f"loopscribe: error: {error_line(exc)}", highlight=False, markup=False, style="red"
        )
        if isinstance(exc, CliError):
            return exc.exit_status
        return 3 if isinstance(exc, FileNotFoundError) else 1


def error_line(exc: BaseException) -> str:
    """An error as one line: what, where and what to do.

    loopscribe's errors, ``OSError`` and :class:`CliError` say that
    themselves; anything else (a bug, a backend's own exception) is named by
    its type, with the way to see where it came from.
    """
    text = _one_line(str(exc))
    if isinstance(exc, CliError | LoopscribeError | OSError):
        return text or type(exc).__name__
    return (
        f"{type(exc).__name__}: {text or 'no message'} (not an error loopscribe knows; "
        "run the command again with --debug for the traceback, and report it)"
    )


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


_TRACEBACK = "\nTraceback (most recent call last):\n"


class _LogFormatter(PrintableFormatter):
    """Log records as one line each: a traceback becomes its exception's line, in parentheses.

    The credential filter has already rendered a logged exception into the
    message, scrubbed; only its last part (the exception's type and
    message) is kept, after the frames.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line."""
        text = super().format(record)
        head, found, trace = text.partition(_TRACEBACK)
        if not found:
            return _one_line(text)
        lines = trace.splitlines()
        frames = [i for i, line in enumerate(lines) if line.startswith(" ")]
        exception = _one_line("\n".join(lines[frames[-1] + 1 if frames else 0 :]))
        return f"{_one_line(head)} ({exception})" if exception else _one_line(head)


@contextmanager
def _logging(*, verbose: bool, debug: bool = False) -> Iterator[None]:
    """Log lines on stderr, printable and without credentials, while a command runs.

    One line each, without a traceback, unless ``debug``. Only when nobody
    configured logging (as ``logging.basicConfig`` decides); the handler is
    removed afterwards, so ``main()`` called in-process (a test, a host)
    leaves the process's logging as it found it and never touches handlers
    it did not add.
    """
    install_log_filter()
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    stderr = logging.StreamHandler()
    formatter = PrintableFormatter if debug else _LogFormatter
    stderr.setFormatter(formatter("loopscribe: %(levelname)s: %(message)s"))
    install_log_filter(stderr)
    level = root.level
    root.addHandler(stderr)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    try:
        yield
    finally:
        root.removeHandler(stderr)
        root.setLevel(level)


def find_records(
    files: Sequence[Path], trace: int, span: int | None, out: Out
) -> Iterator[tuple[Path, Record]]:
    """The records of ``files`` behind a trace (and span), in file order."""
    from .._errors import FormatError

    for path in files:
        try:
            for record, run_trace, ids in _spanned(path):
                if run_trace == trace and (span is None or ids == (trace, span)):
                    yield path, record
        except FormatError as exc:
            if not out.json:
                out.stderr.print(
                    f"skipped {path}: {exc}", highlight=False, markup=False, style="yellow"
                )


def _spanned(path: Path) -> Iterator[tuple[Record, int, tuple[int, int] | None]]:
    """Each record of a run in ``path``: with its run's trace ID and its (trace, span) IDs."""
    from .._reader import read
    from ..otel._ids import record_span, run_trace_id

    runs: dict[str, int] = {}
    for record in read(path, decode=False):
        if record.type == "run_start":
            runs[record.run_id or ""] = run_trace_id(record)
        run_trace = runs.get(record.run_id or "")
        if run_trace is not None:
            yield record, run_trace, record_span(record, run_trace)

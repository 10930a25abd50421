"""What every command prints and how it fails: tables or ``--json`` on stdout,
progress bars on stderr, errors as one line with exit status 1 (2 for usage errors),
logging that never shows a secret.

Output follows the ecosystem's habits: tables and colour only on a terminal,
``--json`` for scripts, progress bars on stderr for long work.
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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

from .._errors import LoopscribeError
from .._logsafe import install as install_log_filter
from ._terminal import DescriptionColumn, PrintableFormatter, SafeConsole

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

    def emit_parts(self, parts: Iterable[bytes]) -> None:
        """Write one JSON line given as parts of its text (a long one, written as made)."""
        write = sys.stdout.buffer.write
        for part in parts:
            write(part)
        write(b"\n")
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


class StopFlag:
    """Set by SIGINT/SIGTERM so a follower flushes and saves its cursor before exiting."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.event.set()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)


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

"""What every ``loopscribe`` command shares: output, errors, files, options.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from .._errors import LoopscribeError
from .._model import Record

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


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with the options every command shares (``--json``, ``-v``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--json", action="store_true", help="machine-readable JSON lines output")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    return parser


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

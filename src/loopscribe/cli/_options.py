"""The options every command shares and how their values are read."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .._home import sessions_home
from ._output import CliError, version

SESSION_HELP = (
    "a session ID or unique ID prefix (looked up in the sessions home, or --dir), a session "
    "file, a record reference (file:///…#seq=N), a viewer link or TRACE_ID/SPAN_ID"
)


REF_BASE_HELP = (
    "where span references point instead of the local file: the store URL sessions are "
    "shipped to (s3://bucket/prefix), or a viewer URL template with {session_id} and {seq}; "
    "default $LOOPSCRIBE_REF_BASE"
)


def home_of(args: argparse.Namespace) -> Path:
    """The sessions home of a command: ``--dir``, else :func:`loopscribe.sessions_home`."""
    given = getattr(args, "home", None)
    return Path(given) if given else sessions_home()


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


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parse ``argv``: the namespace, or the exit status of --help, --version or an error."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2

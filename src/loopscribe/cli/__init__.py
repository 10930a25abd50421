"""The ``loopscribe`` command line: one module per command group over the libraries.

* :mod:`._sessions` — ``ls``, ``show``, ``tail``, ``verify``;
* :mod:`._otel` — ``export``, ``find``, ``span``;
* :mod:`._import` — ``import claude-code|codex``;
* :mod:`._viewer` — ``serve``, ``report``, ``stats``;
* :mod:`._store` — ``ship``, and store URLs for ``ls``, ``show``, ``find``, ``verify``;
* :mod:`._output` — what a command prints and how it fails (one-line errors, exit codes);
* :mod:`._options` — the options every command shares;
* :mod:`._find` — session files, IDs, references and span lookups a command names.

The libraries never import this package; it imports them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import _import, _otel, _sessions, _store, _viewer
from ._options import command_parser, parse, share_options
from ._output import CliError, Out, run

__all__ = ["CliError", "Out", "build_parser", "main"]


NEWCOMER_ORDER = (
    "import",
    "ls",
    "show",
    "serve",
    "find",
    "tail",
    "stats",
    "report",
    "export",
    "span",
    "verify",
    "ship",
)
"""The order ``--help`` lists the commands in: what a newcomer runs first comes first."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = command_parser(
        "loopscribe",
        "Read, search and serve AI-agent sessions (recorded by loopscribe, or imported from "
        "Claude Code and Codex), and bridge them to OpenTelemetry. Start with `loopscribe "
        "import claude-code`, then `loopscribe ls`, `loopscribe show ID` and `loopscribe serve`.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _otel.add_parsers(sub)
    _sessions.add_parsers(sub)
    _viewer.add_parsers(sub)
    _import.add_parsers(sub)
    _store.add_parsers(sub)  # after the others: it lets ls/show/find/verify take a URL
    rank = {name: i for i, name in enumerate(NEWCOMER_ORDER)}
    sub._choices_actions.sort(key=lambda action: rank.get(action.dest, len(rank)))
    share_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = parse(build_parser(), argv)
    return args if isinstance(args, int) else run(args)

"""``loopscribe import claude-code|codex [DIR]``: the importers on the command line."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import shlex
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from .._errors import LoopscribeError
from .._home import sessions_home
from ..importers._defaults import DEFAULT_SETTLE_SECONDS, claude_code_dir, codex_dir, default_jobs
from ._kinds import AGENT_LABELS, file_kind
from ._options import REF_BASE_HELP, home_of, seconds
from ._output import CliError, Out
from ._tables import fitted_table, short_count

if TYPE_CHECKING:
    from .._redact import LineRedactor
    from ..importers._pool import Outcome
    from ..importers._report import ImportReport

# The importers (and the recorder and redactor under them) are imported when an
# import runs: the other commands, and ``--help``, do not load them.

_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""Why a write fails for every transcript alike: the destination has no room."""

AGENTS: dict[str, tuple[str, str, Callable[[], Path]]] = {
    "claude-code": ("claude_code", "Claude Code", claude_code_dir),
    "codex": ("codex", "OpenAI Codex CLI", codex_dir),
}
"""Each agent: its importer (in ``loopscribe.importers``), its name, its transcripts' folder."""


def default_out(agent: str) -> Path:
    """Where imported sessions go by default: ``import/<agent>`` in the sessions home."""
    return sessions_home() / "import" / agent


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``import claude-code`` and ``import codex`` to the ``loopscribe`` parser."""
    parser = sub.add_parser(
        "import",
        help="import Claude Code or Codex transcripts as loopscribe sessions",
        description=(
            "Import coding-agent transcripts into loopscribe sessions, one per transcript. "
            "A cursor beside each session remembers what was imported, so running again "
            "imports only what is new."
        ),
    )
    agents = parser.add_subparsers(dest="agent", required=True, metavar="AGENT")
    for name, (_module, label, default_dir) in AGENTS.items():
        p = agents.add_parser(
            name,
            help=f"import {label} transcripts",
            description=(
                f"Import {label} transcripts into loopscribe sessions, one per transcript. "
                "A cursor beside each session remembers what was imported: running again "
                "imports only what is new, and never writes a record twice."
            ),
        )
        p.add_argument(
            "dir",
            nargs="?",
            metavar="DIR",
            help=f"a folder of transcripts, or one transcript (default: {default_dir()})",
        )
        p.add_argument(
            "--out",
            metavar="DIR",
            help=f"folder of the imported sessions (default: {default_out(name)})",
        )
        p.add_argument(
            "--export",
            action="store_true",
            help="send the new spans at once (OTEL_EXPORTER_OTLP_* or a file beside each session)",
        )
        p.add_argument("--ref-base", metavar="URL", help=REF_BASE_HELP)
        p.add_argument(
            "--settle",
            type=seconds,
            default=DEFAULT_SETTLE_SECONDS,
            metavar="SECONDS",
            help=(
                "a transcript unchanged for this long is finished: its last turn is closed "
                f"(default {DEFAULT_SETTLE_SECONDS:g}; 0 closes every transcript now)"
            ),
        )
        p.add_argument(
            "--jobs",
            type=_jobs,
            default=None,
            metavar="N",
            help=(
                "import N transcripts at once, each in its own process "
                f"(default: every core, {default_jobs()} here; 1 imports in this process)"
            ),
        )
        _add_redaction(p)
        p.set_defaults(handler=cmd_import)


def _jobs(text: str) -> int:
    """``--jobs``: a whole number of processes, at least 1."""
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (1 or more)")
    return jobs


def _add_redaction(parser: argparse.ArgumentParser) -> None:
    """The options naming what an import removes from the sessions it writes."""
    group = parser.add_argument_group(
        "redaction",
        "By default an import replaces the common token shapes (API keys, tokens, JWTs, "
        "private keys, Bearer/Basic credentials, URL passwords) and the values of "
        "credential-named environment variables (*_API_KEY, *_TOKEN, *_SECRET, ...) "
        "with [REDACTED].",
    )
    group.add_argument(
        "--redact-env",
        action="append",
        default=[],
        metavar="NAME",
        help="also remove the value of the environment variable NAME (repeatable)",
    )
    group.add_argument(
        "--redact-pattern",
        action="append",
        default=[],
        metavar="REGEX",
        help=(
            "also remove what this regular expression matches (repeatable; with a group "
            "named 'secret', only that group)"
        ),
    )
    group.add_argument(
        "--no-redact",
        action="store_true",
        help="leave the default shapes and environment values in; --redact-env and "
        "--redact-pattern still apply",
    )


def _redactor(args: argparse.Namespace) -> LineRedactor | None:
    """The redaction the options ask for; ``None`` when nothing is to be removed."""
    secrets: list[str] = []
    for name in args.redact_env:
        value = os.environ.get(name)
        if not value:
            raise CliError(
                f"--redact-env {name}: no such environment variable, or it is empty; "
                "set it, or leave the option out"
            )
        secrets.append(value)
    for pattern in args.redact_pattern:
        try:
            re.compile(pattern.encode())
        except re.error as exc:
            raise CliError(
                f"--redact-pattern {pattern!r}: not a regular expression ({exc}); "
                "quote it for the shell, and escape what should be taken literally"
            ) from None
    from .._redact import Redactor

    if args.no_redact:
        return Redactor(secrets, args.redact_pattern) if secrets or args.redact_pattern else None
    return Redactor.default(secrets, args.redact_pattern)


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM, so an import stops between lines and saves its cursor."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _new_bytes(path: Path, out_dir: Path) -> int:
    """Bytes of ``path`` after its cursor: the work left, for the progress bar."""
    from ..importers._cursor import Cursor, cursor_path

    try:
        size = path.stat().st_size
        cursor = Cursor.load(cursor_path(out_dir / f"{path.stem}.jsonl"))
    except (OSError, LoopscribeError):
        return 0
    return max(0, size - (cursor.offset if cursor is not None else 0))


def _transcripts(files: list[Path], agent: str, root: Path, out: Out) -> list[Path]:
    """The files that are ``agent`` transcripts; refuse when none is and others are.

    Importing another agent's transcripts, or loopscribe's own sessions, would
    write sessions of nothing but ``source_event`` records.
    """
    keep: list[Path] = []
    other: Counter[str] = Counter()
    for path in files:
        try:
            kind = file_kind(path)
        except OSError:
            keep.append(path)  # the importer reports why it cannot be read
            continue
        if kind.kind == agent or kind.kind in ("empty", "json", "other"):
            keep.append(path)
        elif root.is_file():
            raise CliError(_refusal(root, agent, Counter({kind.kind: 1})))
        else:
            other[kind.kind] += 1
    if other and not any(file_kind(p).kind == agent for p in keep if p.is_file()):
        raise CliError(_refusal(root, agent, other))
    if other:
        listed = ", ".join(f"{n} {_KIND_NAMES.get(k, k)}" for k, n in sorted(other.items()))
        out.stderr.print(
            f"skipped {listed}: not {AGENT_LABELS[agent]} transcripts",
            style="dim",
            highlight=False,
            markup=False,
        )
    return keep


_KIND_NAMES = {
    "claude-code": "Claude Code transcript(s)",
    "codex": "Codex rollout(s)",
    "session": "loopscribe session(s)",
    "spans": "span file(s)",
    "cursor": "cursor(s)",
    "artifact": "artifact(s)",
    "report": "report(s)",
}


def _refusal(root: Path, agent: str, other: Counter[str]) -> str:
    label = AGENT_LABELS[agent]
    listed = " and ".join(f"{n} {_KIND_NAMES.get(k, k)}" for k, n in sorted(other.items()))
    message = f"{root}: holds no {label} transcripts but {listed}"
    if len(other) == 1 and root.is_file():
        message = f"{root}: is not a {label} transcript"
    foreign = [k for k in other if k in AGENTS and k != agent]
    if foreign:
        name = foreign[0]
        message += (
            f"; import {AGENT_LABELS[name]} transcripts with "
            f"`loopscribe import {name} {shlex.quote(str(root))}`"
        )
    elif other.get("session"):
        message += "; loopscribe sessions need no import: `loopscribe ls` lists them"
    return message


def cmd_import(args: argparse.Namespace, out: Out) -> int:
    """Import the transcripts under DIR; print a summary table (or JSON lines)."""
    from ..importers._pool import import_many

    importer, label, default_dir = AGENTS[args.agent]
    module = importlib.import_module(f"loopscribe.importers.{importer}")
    root = Path(args.dir) if args.dir else default_dir()
    if not root.exists():
        raise CliError(
            f"{root}: no such file or folder; give the folder of your {label} transcripts"
        )
    out_dir = Path(args.out) if args.out else home_of(args) / "import" / args.agent
    redact = _redactor(args)
    files = _transcripts(module.find_transcripts(root), args.agent, root, out)
    work = [(path, _new_bytes(path, out_dir)) for path in files]
    total = sum(size for _, size in work)
    reports: list[ImportReport] = []
    errors: list[str] = []
    size_of = dict(work)
    with _stop_on_signals() as stop, out.progress(total) as bar:
        task = bar.add_task(f"importing {label}", total=total)
        done = [0]
        reading: dict[Path, int] = {}

        def advance(path: Path, n: int) -> None:
            reading[path] = n
            bar.update(task, completed=done[0] + sum(reading.values()))

        def finished(outcome: Outcome) -> None:
            reading.pop(outcome.path, None)
            done[0] += size_of.get(outcome.path, 0)
            bar.update(task, completed=done[0] + sum(reading.values()))

        outcomes = import_many(
            args.agent,
            files,
            out_dir,
            jobs=args.jobs,
            sizes=[size for _, size in work],
            stop=stop,
            on_progress=advance,
            on_outcome=finished,
            settle_seconds=args.settle,
            redact=redact,
        )
        for outcome in outcomes:
            if outcome.report is None:
                error = outcome.error or f"{outcome.path}: not imported"
                if outcome.no_room:
                    # Every transcript after this one would fail the same way.
                    error += (
                        f"; make room on the file system of {out_dir} (or raise its quota or "
                        "file-size limit) and run the same command again: what was imported "
                        "is kept, the rest resumes"
                    )
                errors.append(error)
                continue
            reports.append(outcome.report)
            if outcome.report.error is not None:
                errors.append(outcome.report.error)
        # Still under the signal handlers: Ctrl-C stops the export and saves its cursor.
        exported = (
            _export(reports, errors, stop, args.ref_base)
            if args.export and not stop.is_set()
            else {}
        )
    if out.json:
        for report in reports:
            obj = report.to_json()
            if report.destination in exported:
                obj["export"] = exported[report.destination]
            out.emit(obj)
    else:
        _print_summary(out, reports, exported, len(files), out_dir)
    for error in errors:
        out.stderr.print(f"loopscribe: error: {error}", highlight=False, markup=False, style="red")
    if stop.is_set():
        out.stderr.print(
            "loopscribe: stopped; run the same command again to continue", highlight=False
        )
    return 1 if errors else 0


def _export(
    reports: list[ImportReport],
    errors: list[str],
    stop: threading.Event,
    ref_base: str | None = None,
) -> dict[Path, dict[str, Any]]:
    """Send the spans of every destination that got new records."""
    from .._resumable_export import ResumableExport

    exported: dict[Path, dict[str, Any]] = {}
    for report in reports:
        if not report.records or stop.is_set():
            continue
        try:
            result = ResumableExport(report.destination, ref_base=ref_base).run(stop=stop)
        except (LoopscribeError, OSError) as exc:
            errors.append(f"exporting {report.destination}: {exc}")
            continue
        exported[report.destination] = result.to_json()
        if result.failed:
            errors.append(
                f"exporting {report.destination}: {result.failed} spans not sent to "
                f"{result.destination}; run `loopscribe export {report.destination}` to retry"
            )
    return exported


def _row(name: str, c: Counter[str], *, exported: bool) -> list[str]:
    row = [
        name,
        str(c["records"]),
        str(c["model_calls"]),
        f"{c['tool_results']}/{c['tool_calls']}",
        short_count(c["input_tokens"]),
        short_count(c["output_tokens"]),
        str(c["unknown"]),
        str(c["pending"]),
    ]
    if exported:
        row.append(str(c["sent"]))
    return row


def _print_summary(
    out: Out,
    reports: list[ImportReport],
    exported: dict[Path, dict[str, Any]],
    found: int,
    out_dir: Path,
) -> None:
    changed = [r for r in reports if not r.up_to_date]
    headers = ["session", "records", "model\ncalls", "tool\nresults/calls"]
    headers += ["tokens\nin", "tokens\nout", "unknown", "open\ncalls"]
    if exported:
        headers.append("spans\nsent")
    rows: list[list[str]] = []
    totals: Counter[str] = Counter()
    for r in changed:
        unknown = sum(r.unknown.values()) + r.invalid_lines
        sent = exported.get(r.destination, {}).get("sent", 0)
        counts = Counter(
            records=r.records,
            model_calls=r.model_calls,
            tool_calls=r.tool_calls,
            tool_results=r.tool_results,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            unknown=unknown,
            pending=r.pending_calls,
            sent=sent,
        )
        totals.update(counts)
        rows.append(_row(r.source.stem, counts, exported=bool(exported)))
    if len(changed) > 1:
        rows.append(_row("total", totals, exported=bool(exported)))
    if changed:
        out.stdout.print(
            fitted_table(
                headers, rows, out.stdout.width, flexible=[0], title=f"imported into {out_dir}"
            )
        )
    current = len(reports) - len(changed)
    out.stdout.print(
        f"{len(changed)} of {found} transcripts had new lines; {current} were up to date",
        highlight=False,
        soft_wrap=False,
    )
    unknown_types: Counter[str] = Counter()
    for r in reports:
        unknown_types.update(r.unknown)
        if r.invalid_lines:
            unknown_types["invalid_line"] += r.invalid_lines
    if unknown_types:
        listed = ", ".join(f"{k} x{v}" for k, v in sorted(unknown_types.items()))
        out.stdout.print(
            f"kept as source_event records (types the importer does not map): {listed}",
            highlight=False,
            soft_wrap=False,  # wrapped at words to the terminal's width
        )
    unpaired = sum(r.unpaired_calls for r in reports)
    if unpaired:
        out.stdout.print(
            f"{unpaired} tool calls ended without a result (their turn ended first)",
            highlight=False,
            soft_wrap=False,  # wrapped at words to the terminal's width
        )

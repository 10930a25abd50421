"""Finding what a command names: session files under a folder, a session by ID or
prefix, a record by reference, the records behind a trace or span."""

from __future__ import annotations

import os
import shlex
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import LoopscribeError
from .._home import sessions_home
from .._model import Record
from .._safeopen import not_a_session_file
from ._kinds import AGENT_LABELS, candidate_files, describe, file_kind
from ._output import CliError, NotFoundError, Out
from ._resolve import looks_like_id, parse_reference


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

"""Import Claude Code transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

One transcript becomes one loopscribe session, one run per turn (a user
prompt and everything the agent did until the next prompt, or until
``system/turn_duration``). Subagents, whose lines Claude Code writes to
``<session>/subagents/agent-<id>.jsonl``, are nested under the ``Task`` tool
call that started them (Claude Code 2.0 wrote them as ``agent-<id>.jsonl``
beside the transcript); when a transcript has no such file, the subagent's
messages are taken from the ``agent_progress`` lines of the main transcript.

================================  =================================================
source line                       records
================================  =================================================
``user`` prompt                   closes the previous turn's run, begins a run, then
                                  ``message_end`` (no execution)
``user`` other text (meta,        ``message_end`` in the current run (a subagent's
interruption, command output,     under its ``agent`` execution)
subagent prompt)
``user`` ``tool_result`` blocks   ``tool_exec_end`` of the ``tool`` execution with the
                                  same id: result, ``is_error``, small ``details``
``user`` compact summary          session-level ``compaction`` record (its summary)
``assistant`` (``message.id``)    first line of a response: ``model_request``
                                  (model, request id); each line: ``message_end``
                                  of its text/thinking blocks, ``tool_exec_start``
                                  per ``tool_use`` block; when the response is over:
                                  ``model_exec_end`` with model, the usage of its last
                                  line (counted once) and the stop reason
``system/compact_boundary``       ``context_transform_start``/``_end`` of a
                                  ``context`` execution, the summarizing subagent
                                  (``agent-acompact-*``) nested in it
``system/turn_duration``          ends the turn: ``run_close``
``progress/agent_progress``       a subagent's messages, when it has no file
``isSidechain`` ``user`` and      a subagent's messages written into the transcript
``assistant`` lines               (Claude Code 1.0): under the ``Task`` call whose
                                  prompt the chain's first line repeats
other ``progress``, ``file-       not recorded, counted in ``report.skipped``
history-snapshot``,
``queue-operation``
anything else                     ``source_event`` with the whole line, counted in
                                  ``report.unknown``
================================  =================================================

Every record's data has ``source: {"file", "line", "uuid"}`` naming the line
it came from. A response is over when another response, a prompt, a
compaction or the end of the turn follows: until then it stays open, also
across imports (its state is kept in the cursor).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from .._errors import LoopscribeError
from .._redact import LineRedactor
from ._claude_mapping import ClaudeCodeMapping
from ._claude_state import NAME, AgentContext
from ._defaults import DEFAULT_SETTLE_SECONDS
from ._defaults import claude_code_dir as default_dir
from ._importer import Importer, result_of
from ._lines import MAX_LINE_DEPTH, nested_type, parse_ts, read_lines, too_deep
from ._mapper import Source
from ._report import ImportReport

__all__ = [
    "NAME",
    "AgentContext",
    "ClaudeCodeImporter",
    "ClaudeCodeMapping",
    "default_dir",
    "find_transcripts",
    "import_transcript",
]


def find_transcripts(root: Path) -> list[Path]:
    """The transcripts under ``root`` (or ``root`` itself), without subagent files.

    Subagent files are ``<session>/subagents/agent-<id>.jsonl`` (Claude Code
    2.1) or ``agent-<id>.jsonl`` beside the sessions (2.0); they are imported
    with the session they name.
    """
    if root.is_file():
        return [root]
    return sorted(
        p
        for p in root.rglob("*.jsonl")
        if p.parent.name != "subagents" and not p.name.startswith("agent-") and p.is_file()
    )


def import_transcript(
    path: Path,
    out_dir: Path,
    *,
    finished: bool | None = None,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    redact: LineRedactor | bool | None = True,
    **options: Any,
) -> ImportReport:
    """Import what is new in one Claude Code transcript into ``out_dir/<session>.jsonl``.

    Args:
        path: The transcript (``<session id>.jsonl``); its subagents are read
            from ``<session id>/subagents/`` beside it.
        out_dir: The folder of destination sessions (created if missing).
        finished: Whether the transcript is complete, so its last response
            and run can be closed. ``None`` decides by age: unchanged for
            ``settle_seconds``.
        settle_seconds: See ``finished``.
        redact: What to scrub from the records (and the cursor): ``True``
            (the default) applies ``Redactor.default()`` (the common token
            shapes and the values of credential-named environment
            variables); a ``Redactor`` or any line hook is used as it is;
            ``False`` or ``None`` keeps everything.
        options: ``stop`` (a ``threading.Event``) and ``on_progress`` (called
            with the bytes read so far).

    Returns:
        What was imported.

    Raises:
        ImportStateError: The transcript, destination and cursor disagree.
        OSError: A file cannot be read or written.
    """
    return result_of(
        ClaudeCodeImporter,
        path,
        out_dir,
        path.stem,
        finished=finished,
        settle_seconds=settle_seconds,
        redact=redact,
        **options,
    )


class ClaudeCodeImporter(ClaudeCodeMapping, Importer):
    """Imports a Claude Code transcript file; subagents come from their own files."""

    def __init__(self, source: Path, destination: Path, **options: Any) -> None:
        super().__init__(source, destination, **options)
        self.subagent_dir = self.source.parent / self.source.stem / "subagents"
        self._has_file: dict[str, bool] = {}

    def skip_line(self, raw: bytes) -> str | None:
        """Progress (but agent progress), file-history and queue lines, told apart unparsed."""
        if raw.startswith(b'{"type":"file-history-snapshot"'):
            return "file-history-snapshot"
        if raw.startswith(b'{"type":"queue-operation"'):
            return "queue-operation"
        kind = nested_type(raw, b'"type":"progress","data":')
        if kind is None or kind == b"agent_progress":
            return None
        return f"progress/{kind.decode('ascii', 'replace')}"

    def _has_own_lines(self, agent_id: str) -> bool:
        found = self._has_file.get(agent_id)
        if found is None:
            found = self._has_file[agent_id] = self._agent_path(agent_id).is_file()
        return found

    def _agent_path(self, agent_id: str) -> Path:
        """A subagent's file: in ``<session>/subagents/``, else beside the transcript (2.0)."""
        path = self.subagent_dir / f"agent-{agent_id}.jsonl"
        if not path.is_file():
            beside = self.source.parent / f"agent-{agent_id}.jsonl"
            if beside != self.source and self._names_this_session(beside):
                return beside
        return path

    def _names_this_session(self, path: Path) -> bool:
        """Whether a subagent file beside the transcript belongs to this session.

        Claude Code 2.0 kept every session's subagent files in the project
        folder; a file's lines name the session it ran in.
        """
        return _first_session_id(path) == self.source.stem

    def _map_agent(self, agent_id: str, parent: str | None, name: str | None) -> bool:
        """Import what is new in a subagent's file as an ``agent`` execution under ``parent``."""
        path = self._agent_path(agent_id)
        if not path.is_file():
            return False
        offset, line, _runs = self.agent_files.get(agent_id, [0, 0, 0])
        file = str(path)
        report = self.report
        ctx: AgentContext | None = None
        last_source: Source | None = None
        last_ts: datetime | None = None
        started = _start_ts(path, offset)
        for number, end, raw in read_lines(path, offset, line):
            source: Source = {"file": file, "line": number}
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                obj = raw.decode("utf-8", "replace").rstrip("\n")
                report.invalid_lines += 1
            ts = (parse_ts(obj.get("timestamp")) if isinstance(obj, dict) else None) or last_ts
            if ctx is None:
                ctx = self._begin_agent(agent_id, parent, name, source, started or ts)
            try:
                if too_deep(raw, obj):
                    raise ValueError(f"nested deeper than {MAX_LINE_DEPTH} levels")
                self._handle_in(ctx, obj, source, ts)
            except (LoopscribeError, OSError):
                raise  # the destination's failures, not the line's
            except Exception as exc:
                self.bad_line(path, number, raw, exc)
            report.lines += 1
            report.bytes += len(raw)
            offset, line = end, number
            last_source, last_ts = source, ts
        if ctx is None or last_source is None:
            return False
        self._finish_agent(ctx, (offset, line), last_source, last_ts)
        return True

    def _compact_agent(self, boundary: datetime | None) -> tuple[str | None, datetime | None]:
        """The summarizing subagent of a compaction: the latest new one begun before it."""
        if boundary is None or not self.subagent_dir.is_dir():
            return None, None
        best: tuple[datetime, str] | None = None
        for path in self.subagent_dir.glob("agent-acompact*.jsonl"):
            agent_id = path.stem.removeprefix("agent-")
            if agent_id in self.agent_files:
                continue
            started = _start_ts(path)
            if started is not None and started <= boundary and (best is None or started > best[0]):
                best = (started, agent_id)
        return (None, None) if best is None else (best[1], best[0])

    def _unlinked_agents(self) -> list[str]:
        found: set[str] = set()
        if self.subagent_dir.is_dir():
            found.update(p.stem[6:] for p in self.subagent_dir.glob("agent-*.jsonl"))
        for path in self.source.parent.glob("agent-*.jsonl"):
            if path != self.source and self._names_this_session(path):
                found.add(path.stem[6:])
        return sorted(a for a in found if a not in self.agent_files)


_SESSION_ID = re.compile(rb'"sessionId"\s*:\s*"([^"\\]*)"')
_SESSION_OF: dict[str, str] = {}
"""The session each subagent file beside transcripts names, read once per process."""


def _first_session_id(path: Path) -> str | None:
    """The ``sessionId`` the first line of a transcript file names.

    Claude Code writes it among the first keys of a line: the first 4 KiB
    almost always hold it (at most 64 KiB are read). A project folder of
    Claude Code 2.0 holds every session's subagent files, and each import of
    one of its sessions asks about all of them, so answers are kept.
    """
    key = str(path)
    if key in _SESSION_OF:
        return _SESSION_OF[key]
    found = None
    try:
        with open(path, "rb") as stream:
            head = stream.read(4096)
            line = head.split(b"\n", 1)[0]
            found = _SESSION_ID.search(line)
            if found is None and len(line) == len(head) == 4096:
                found = _SESSION_ID.search((head + stream.read(61440)).split(b"\n", 1)[0])
    except OSError:
        return None
    if found is None:
        return None  # not written yet, or names none: ask again next time
    answer = found.group(1).decode("utf-8", "replace")
    if len(_SESSION_OF) < 100_000:
        _SESSION_OF[key] = answer
    return answer


def _start_ts(path: Path, offset: int = 0) -> datetime | None:
    """When a subagent started: its last line before its first model response.

    A subagent file begins with the messages it was given, some copied with
    their original, older timestamps (a compaction agent gets the hook
    reminders of the conversation); the agent starts with the last of them.
    """
    return start_ts(_parsed(read_lines(path, offset, 0)))


def _parsed(found: Iterator[tuple[int, int, bytes]]) -> Iterator[Any]:
    for _number, _end, raw in found:
        try:
            yield orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue


def start_ts(lines: Iterable[Any]) -> datetime | None:
    """When a subagent started, from its parsed lines: see :func:`_start_ts`.

    ``None`` when its first model response is not among ``lines`` yet and no
    line has a timestamp.
    """
    started: datetime | None = None
    for obj in lines:
        if not isinstance(obj, dict):
            continue
        ts = parse_ts(obj.get("timestamp"))
        if obj.get("type") == "assistant":
            return started or ts
        if ts is not None and (started is None or ts > started):
            started = ts
    return started

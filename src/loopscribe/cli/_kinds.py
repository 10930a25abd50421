"""What a file is, told from its name and first lines: a session, or what instead.

Every command that takes files or folders asks here, so a folder's span files,
cursors, artifacts and foreign transcripts are skipped without being called
damaged, and a file named on purpose is answered with what it is and what to do.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

Kind = Literal[
    "session",
    "empty",
    "spans",
    "cursor",
    "artifact",
    "report",
    "claude-code",
    "codex",
    "json",
    "other",
]

SNIFF_BYTES = 256 << 10
"""How much of a file is read to tell what it is (a few lines)."""

SNIFF_LINES = 8

_CLAUDE_TYPES = frozenset(
    {"user", "assistant", "summary", "system", "queue-operation", "file-history-snapshot"}
)
_CODEX_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
)
AGENT_LABELS = {"claude-code": "Claude Code", "codex": "OpenAI Codex CLI"}


@dataclass(frozen=True, slots=True)
class FileKind:
    """What a file is."""

    kind: Kind
    session_id: str | None = None
    """The session's ID, for a loopscribe session."""
    source_id: str | None = None
    """For an imported session: the agent's own ID of the transcript (lower case)."""

    @property
    def is_session(self) -> bool:
        """A loopscribe session file."""
        return self.kind == "session"


def _quote(path: Path) -> str:
    return shlex.quote(str(path))


def describe(path: Path, kind: FileKind) -> str:
    """Why ``path`` is not a session, and what to do with it (for an error message)."""
    match kind.kind:
        case "empty":
            return f"{path}: is empty, not a loopscribe session"
        case "spans":
            return (
                f"{path}: holds exported spans (OTLP JSON lines), not a loopscribe session; "
                f"its session is {_quote(path.with_name(path.name.removesuffix('.otlp.jsonl')))}"
            )
        case "cursor":
            return (
                f"{path}: is an export or import cursor (what was already sent or imported), "
                "not a loopscribe session"
            )
        case "artifact":
            return f"{path}: is an artifact stored beside a session, not a loopscribe session"
        case "report":
            return f"{path}: is an HTML report; open it in a web browser"
        case "claude-code" | "codex":
            label = AGENT_LABELS[kind.kind]
            article = "an" if label[0] in "AEIOU" else "a"
            return (
                f"{path}: looks like {article} {label} transcript, not a loopscribe session; "
                f"import it with `loopscribe import {kind.kind} {_quote(path)}`"
            )
        case "json":
            return (
                f"{path}: is JSON, but not a loopscribe session (its first line is not a "
                "session_start record)"
            )
        case _:
            return f"{path}: is not a loopscribe session (not JSON lines)"


def _first_lines(path: Path) -> tuple[list[bytes], bytes]:
    """The first complete lines, and the start of the file."""
    # A FIFO or a device among the files is never opened: the open of a FIFO
    # blocks. Callers count an OSError as an unreadable file.
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with path.open("rb") as file:
        head = file.read(SNIFF_BYTES)
    lines = head.split(b"\n")
    if len(head) == SNIFF_BYTES:
        lines.pop()  # cut mid-line
    return [line for line in lines[:SNIFF_LINES] if line.strip()], head


_SESSION_START = re.compile(rb'^\{"session_id":"([0-9a-f]{32})","seq":0,"type":"session_start"')
"""How loopscribe writes the first line: told apart even when it is longer than a sniff."""


def _foreign(obj: Mapping[str, Any]) -> Kind | None:
    kind = obj.get("type")
    if "resourceSpans" in obj:
        return "spans"
    if kind in _CODEX_TYPES and "payload" in obj:
        return "codex"
    if kind in _CLAUDE_TYPES and ("sessionId" in obj or "uuid" in obj or "leafUuid" in obj):
        return "claude-code"
    if "snapshot" in obj and "messageId" in obj:
        return "claude-code"
    if "id" in obj and "timestamp" in obj and ("instructions" in obj or "git" in obj):
        return "codex"  # the rollout format before session_meta
    return None


def file_kind(path: Path) -> FileKind:
    """What ``path`` (an existing file) is: a session, or what instead.

    Raises:
        OSError: It cannot be read.
    """
    name = path.name
    if name.endswith(".otlp.jsonl"):
        return FileKind("spans")
    if name.endswith((".export-cursor", ".import-cursor")):
        return FileKind("cursor")
    if any(part.endswith(".artifacts") for part in path.parent.parts):
        return FileKind("artifact")
    if name.endswith((".html", ".htm")):
        return FileKind("report")
    lines, head = _first_lines(path)
    if not lines:
        if (match := _SESSION_START.match(head)) is not None:
            return FileKind("session", match[1].decode())  # a very long session_start
        return FileKind("empty" if not head.strip() else "other")
    try:
        first = orjson.loads(lines[0])
    except orjson.JSONDecodeError:
        return FileKind("other")
    if not isinstance(first, dict):
        return FileKind("json")
    if (
        first.get("type") == "session_start"
        and first.get("seq") == 0
        and isinstance(first.get("session_id"), str)
    ):
        return FileKind("session", first["session_id"], _source_id(first))
    for line in lines:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and (foreign := _foreign(obj)) is not None:
            return FileKind(foreign)
    return FileKind("json")


def _source_id(first: Mapping[str, Any]) -> str | None:
    """The agent's transcript ID an imported session's ``session_start`` names."""
    data = first.get("data")
    metadata = data.get("metadata") if isinstance(data, dict) else None
    imported = metadata.get("import") if isinstance(metadata, dict) else None
    if not isinstance(imported, dict):
        return None
    for key in ("session_id", "id"):
        value = imported.get(key)
        if isinstance(value, str) and value:
            return value.lower()
    return None


def candidate_files(root: Path, errors: list[OSError] | None = None) -> list[Path]:
    """Every ``*.jsonl`` below ``root`` outside artifact folders, in path order.

    A folder that cannot be read is left out; ``errors`` gets why, if given.
    """
    found: list[Path] = []
    for folder, dirs, files in os.walk(root, onerror=None if errors is None else errors.append):
        dirs[:] = sorted(d for d in dirs if not d.endswith(".artifacts"))
        base = Path(folder)
        found.extend(
            base / f
            for f in sorted(files)
            if f.endswith(".jsonl")
            and not f.endswith(".otlp.jsonl")
            and os.path.isfile(base / f)  # regular files only: never open a FIFO
        )
    return sorted(found)

"""Helpers for the importer tests: the real transcripts, copies, normal forms of results."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import Record, read
from loopscribe.otel import replay

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"
"""The real transcripts shipped with the tests (MIT, see the README there)."""

EXTRA = Path(
    os.environ.get(
        "LOOPSCRIBE_TRANSCRIPTS",
        Path(__file__).resolve().parents[3] / "shared" / "data" / "transcripts",
    )
)
"""More transcripts, used when present (``LOOPSCRIBE_TRANSCRIPTS`` names the folder)."""

LIFECYCLE = frozenset({"session_start", "run_start", "run_close"})


def transcripts(agent: str) -> list[Path]:
    """The real transcripts of one agent: the shipped ones, plus any found in ``EXTRA``."""
    found: dict[str, Path] = {}
    for folder in (DATA / agent, EXTRA / agent):
        if folder.is_dir():
            for path in sorted(folder.glob("*.jsonl")):
                if path.is_file() and not path.name.startswith("agent-"):  # subagents: with theirs
                    found.setdefault(path.name, path)
    assert found, f"no transcripts in {DATA / agent}: the test data is missing from this checkout"
    return [found[name] for name in sorted(found)]


def ids(paths: list[Path]) -> list[str]:
    """Test IDs for transcript parameters."""
    return [p.stem[:24] for p in paths]


def copy_transcript(source: Path, folder: Path) -> Path:
    """Copy a transcript and its subagent files (its folder, or beside it) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    shutil.copyfile(source, target)
    sub = source.parent / source.stem
    if sub.is_dir():
        shutil.copytree(sub, folder / source.stem)
    for beside in source.parent.glob("agent-*.jsonl"):
        if beside != source and not (folder / beside.name).exists():
            shutil.copyfile(beside, folder / beside.name)
    return target


def lines(path: Path) -> Iterator[dict[str, Any]]:
    """The parsed lines of a JSONL file."""
    with open(path, "rb") as stream:
        for raw in stream:
            yield orjson.loads(raw)


def records(path: Path) -> list[Record]:
    """Every record of a session file, raw."""
    return list(read(path, decode=False))


def normal_form(path: Path) -> list[tuple[Any, ...]]:
    """What must be equal between a whole and a split import of the same transcript.

    Every record but ``session_start``, in order: its type, seq, the ordinal of
    its run (run IDs are random), source timestamp, execution and data
    (encoded, so equal means byte-equal JSON). Lifecycle records are included,
    so the runs must begin and end at the same places and times.
    """
    runs: dict[str, int] = {}
    out: list[tuple[Any, ...]] = []
    for r in records(path):
        if r.type == "session_start":
            continue
        run = None if r.run_id is None else runs.setdefault(r.run_id, len(runs))
        execution = None if r.execution is None else r.execution.to_json()
        out.append((r.type, r.seq, run, r.ts.isoformat(), execution, orjson.dumps(r.data)))
    return out


def spans(path: Path) -> list[ReadableSpan]:
    """The spans a replay of a session file emits."""
    exporter = InMemorySpanExporter()
    replay(path, SimpleSpanProcessor(exporter))
    return list(exporter.get_finished_spans())


def _seq_first(span: ReadableSpan) -> int:
    value = (span.attributes or {}).get("loopscribe.seq.first", 0)
    return value if isinstance(value, int) else 0


def source_ref(span: ReadableSpan) -> tuple[str, int] | None:
    """The transcript file and line a span names, if it names one."""
    attrs = span.attributes or {}
    file, line = attrs.get("loopscribe.source.file"), attrs.get("loopscribe.source.line")
    if isinstance(file, str) and isinstance(line, int):
        return file, line
    return None


def span_structure(
    found: list[ReadableSpan], replace: dict[str, str] | None = None
) -> list[tuple[Any, ...]]:
    """Spans with IDs replaced by what they derive from, sorted: for whole/split comparison.

    ``replace`` rewrites parts of string attributes (file paths that differ
    between the two imports being compared).
    """
    replace = replace or {}
    run_ordinal: dict[str, int] = {}
    key_of: dict[int, tuple[Any, ...]] = {}
    for span in sorted(found, key=_seq_first):
        attrs = span.attributes or {}
        run = run_ordinal.setdefault(str(attrs["loopscribe.run.id"]), len(run_ordinal))
        key_of[span.context.span_id] = (
            run,
            attrs.get("loopscribe.execution.id"),
            attrs.get("loopscribe.attempt"),
        )
    ignored = {"gen_ai.conversation.id", "session.id", "loopscribe.run.id"}
    out = []
    for span in found:
        attrs = span.attributes or {}
        parent = None if span.parent is None else key_of.get(span.parent.span_id, "missing")
        kept = tuple(
            sorted((k, _replaced(v, replace)) for k, v in attrs.items() if k not in ignored)
        )
        out.append(
            (
                key_of[span.context.span_id],
                parent,
                span.name,
                span.start_time,
                span.end_time,
                span.status.status_code.name,
                kept,
            )
        )
    return sorted(out, key=repr)


def _replaced(value: Any, replace: dict[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in replace.items():
            value = value.replace(old, new)
    return value


def split_at(source: Path, offset: int, target: Path) -> bytes:
    """Write the first ``offset`` bytes of ``source`` to ``target``; return the rest."""
    data = source.read_bytes()
    target.write_bytes(data[:offset])
    return data[offset:]


def line_offsets(path: Path) -> list[int]:
    """The byte offset where each line of ``path`` starts (and the file's size, last)."""
    offsets = [0]
    with open(path, "rb") as stream:
        for raw in stream:
            offsets.append(offsets[-1] + len(raw))
    return offsets


BODY_KEYS = frozenset(
    {"text", "thinking", "content", "input", "arguments", "output", "prompt", "command"}
)
LABEL_KEYS = frozenset(
    {"id", "tool_use_id", "call_id", "type", "name", "model", "role", "signature"}
)


def body_strings(path: Path, minimum: int = 24, *, bare: bool = False) -> list[str]:
    """Message, argument and tool-output text from a transcript: what spans must never carry.

    ``bare``: lines without a ``payload`` are items themselves (Codex rollouts
    before the ``{timestamp, type, payload}`` wrapper).
    """
    found: set[str] = set()

    def walk(value: Any, body: bool) -> None:
        if isinstance(value, str):
            if body and len(value) >= minimum:
                found.add(value[:200])
        elif isinstance(value, list):
            for item in value:
                walk(item, body)
        elif isinstance(value, dict):
            for key, item in value.items():
                if key in LABEL_KEYS:
                    continue
                walk(item, body or key in BODY_KEYS or (key == "message" and type(item) is str))

    for obj in lines(path):
        found_body = obj.get("message") or obj.get("payload") or obj.get("data")
        walk(obj if bare and found_body is None else found_body, False)
    return sorted(found)


def attribute_text(found: list[ReadableSpan]) -> str:
    """Every string attribute value and span name, joined (one haystack to search)."""
    parts: list[str] = []
    for span in found:
        parts.append(span.name)
        for value in (span.attributes or {}).values():
            if isinstance(value, str):
                parts.append(value)
            elif isinstance(value, tuple):
                parts.extend(str(v) for v in value)
        for event in span.events:
            parts.append(event.name)
            parts.extend(str(v) for v in (event.attributes or {}).values())
    return "\n".join(parts)


@functools.cache
def _file_lines(path: str) -> list[bytes]:
    with open(path, "rb") as stream:
        return stream.readlines()


def source_line(path: str, number: int) -> bytes:
    """Line ``number`` (1-based) of a file (files are read once and kept: tests only)."""
    found = _file_lines(path)
    assert 0 < number <= len(found), f"{path} has no line {number}"
    return found[number - 1]


def freshen(path: Path) -> Path:
    """Shift every ``timestamp`` of a transcript so its last one is a second ago: live."""
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    stamps = [
        datetime.fromisoformat(o["timestamp"].replace("Z", "+00:00"))
        for o in lines
        if isinstance(o, dict) and isinstance(o.get("timestamp"), str)
    ]
    shift = datetime.now(UTC) - timedelta(seconds=1) - max(stamps)
    for o in lines:
        if isinstance(o, dict) and isinstance(o.get("timestamp"), str):
            ts = datetime.fromisoformat(o["timestamp"].replace("Z", "+00:00")) + shift
            o["timestamp"] = ts.isoformat().replace("+00:00", "Z")
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in lines))
    return path

"""The records an import writes stay byte for byte what they were.

``tests/data/import-golden.json`` holds the SHA-256 of every session file the
importers wrote for the shipped transcripts (imported whole, and in two
imports split at the middle line), in a normal form: session and run IDs
numbered in order of appearance, the import's own start time and the folder
of the transcript replaced. Imports are otherwise deterministic, so any
change to a record's bytes (a key order, a number's form, a new field) shows
here. A deliberate change to the format regenerates the file with
``LOOPSCRIBE_WRITE_GOLDEN=1 pytest tests/importers/test_golden.py`` and says
what changed in docs/importers.md.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from loopscribe.importers import claude_code, codex

from ._support import DATA, copy_transcript

GOLDEN = DATA.parent / "import-golden.json"
IMPORTERS: dict[str, ModuleType] = {"claude-code": claude_code, "codex": codex}
SHIPPED = [
    (agent, path)
    for agent in IMPORTERS
    for path in sorted((DATA / agent).glob("*.jsonl"))
    if path.is_file()
]
_ID = re.compile(rb'("(?:session_id|run_id)":")([0-9a-f]{16,32})')
_START_TS = re.compile(rb'^(\{[^\n]*?"ts":")[^"]*')
_COMPACTION_AT = re.compile(rb'"compaction":(\d+)(?=,"prev"|\})')


def normal_form(data: bytes, folder: Path) -> bytes:
    """A session file without what differs between two imports of the same transcript.

    A ``message_end``'s ``compaction`` is a byte offset, which moves with the
    length of the folder's path in earlier records: it becomes the seq there.
    """
    found: dict[bytes, bytes] = {}
    seq_at: dict[int, int] = {}
    offset = 0
    for line in data.splitlines(keepends=True):
        seq_at[offset] = orjson.loads(line)["seq"]
        offset += len(line)

    def number(match: re.Match[bytes]) -> bytes:
        name = found.setdefault(match.group(2), b"ID%04d" % len(found))
        return match.group(1) + name

    def at_seq(match: re.Match[bytes]) -> bytes:
        return b'"compaction":"seq %d"' % seq_at[int(match.group(1))]

    data = _COMPACTION_AT.sub(at_seq, data)
    data = _ID.sub(number, data)
    data = _START_TS.sub(rb"\1NOW", data, count=1)
    return data.replace(str(folder).encode(), b"ROOT")


def imported(agent: str, source: Path, tmp: Path) -> dict[str, bytes]:
    """The normal forms of the import of ``source``: whole, and in two imports."""
    module = IMPORTERS[agent]
    out: dict[str, bytes] = {}
    module.import_transcript(source, tmp / "whole", finished=True)
    lines = source.read_bytes().splitlines(keepends=True)
    half = copy_transcript(source, tmp / "src")
    half.write_bytes(b"".join(lines[: len(lines) // 2]))
    module.import_transcript(half, tmp / "split", finished=False)
    half.write_bytes(b"".join(lines))
    module.import_transcript(half, tmp / "split", finished=True)
    for kind, folder in (("whole", source.parent.parent), ("split", tmp / "src")):
        for path in sorted((tmp / kind).glob("*.jsonl")):
            out[f"{agent}/{kind}/{path.name}"] = normal_form(path.read_bytes(), folder)
    return out


@pytest.mark.parametrize(("agent", "source"), SHIPPED, ids=[p.stem[:24] for _, p in SHIPPED])
def test_records_are_byte_for_byte_as_before(agent: str, source: Path, tmp_path: Path) -> None:
    """Each session file an import writes hashes to the digest recorded for it."""
    golden = orjson.loads(GOLDEN.read_bytes())
    found = imported(agent, source.resolve(), tmp_path)
    assert found, f"{source}: the import wrote no session file"
    if os.environ.get("LOOPSCRIBE_WRITE_GOLDEN") == "1":
        golden.update({k: hashlib.sha256(v).hexdigest() for k, v in found.items()})
        GOLDEN.write_bytes(orjson.dumps(golden, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        return
    for name, data in found.items():
        # A transcript with no digest fails too: a new one cannot go unguarded.
        actual = tmp_path / "normal" / name.replace("/", "--")
        actual.parent.mkdir(exist_ok=True)
        actual.write_bytes(data)
        assert hashlib.sha256(data).hexdigest() == golden.get(name), (
            f"{name}: the records differ from those recorded in {GOLDEN.name} (normal form "
            f"written to {actual}; compare it with the output of the code before the change)"
        )

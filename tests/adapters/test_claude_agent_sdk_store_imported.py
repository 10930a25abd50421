"""The store writes the importer's records for the same Claude Code lines, hostile ones too.

Lines that use the codec's reserved key ``$ls`` (as a key, as a tag-like
first key, escaped forms) together with what an import reads differently
from the SDK: an integer past 64 bits (orjson reads a float), ``NaN`` and
``Infinity`` and a lone surrogate (orjson refuses the line: an
``invalid_line``), a line nested past the importer's depth. The SDK parses
each line with Python's ``json`` and appends it; an import reads the file.
Both must write the same records, also when the store is closed and a new
one continues the session after every batch (the mapping rebuilt by replay).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import cast

import pytest
from claude_agent_sdk.types import SessionStoreEntry

from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

from .test_claude_agent_sdk import KEY, TRANSCRIPTS, imported, mapped

_T = "2026-02-10T23:59:{:02d}.000Z"
_DEEP = "[" * 245 + "1" + "]" * 245
HOSTILE = [
    # A tool call whose input uses the reserved key as a tag and past 64 bits.
    '{"type":"assistant","uuid":"h-a1","sessionId":"s","timestamp":"%s","message":{"model":'
    '"claude-x","id":"msg_h1","type":"message","role":"assistant","content":[{"type":'
    '"tool_use","id":"toolu_h1","name":"Bash","input":{"$ls":"assistant","command":"ls",'
    '"n":1208925819614629174706176,"$$ls":{"$ls":[1,{"$ls":"$dict"}]}}}],"stop_reason":'
    '"tool_use","usage":{"input_tokens":5,"output_tokens":2}}}',
    # Its result: the reserved key beside NaN, so an import cannot read the line.
    '{"type":"user","uuid":"h-u1","sessionId":"s","timestamp":"%s","message":{"role":"user",'
    '"content":[{"type":"tool_result","tool_use_id":"toolu_h1","content":"ok","$ls":NaN}]}}',
    # A prompt holding the reserved key and a lone surrogate.
    '{"type":"user","uuid":"h-u2","sessionId":"s","timestamp":"%s","message":{"role":"user",'
    '"content":[{"type":"text","text":"bad \\ud800 $ls","$ls":"text"}]}}',
    # The reserved key at the top of the line, and Infinity.
    '{"$ls":"user","type":"user","uuid":"h-u3","sessionId":"s","timestamp":"%s","message":'
    '{"role":"user","content":"go on","$ls":-Infinity}}',
    # A plain answer whose usage uses the reserved key.
    '{"type":"assistant","uuid":"h-a2","sessionId":"s","timestamp":"%s","message":{"model":'
    '"claude-x","id":"msg_h2","type":"message","role":"assistant","content":[{"type":"text",'
    '"text":"done","$ls":{"$ls":null}}],"stop_reason":"end_turn","usage":{"input_tokens":7,'
    '"output_tokens":1,"$ls":"usage","big":-99999999999999999999999}}}',
    # Nested past the importer's depth, with the reserved key.
    '{"type":"user","uuid":"h-u4","sessionId":"s","timestamp":"%s","message":{"role":"user",'
    '"content":"deep","$ls":' + _DEEP.replace("%", "%%") + "}}",
]


def _transcript(folder: Path) -> Path:
    """A real transcript followed by the hostile lines, written as Claude Code writes lines."""
    base = (TRANSCRIPTS / "tool_heavy.jsonl").read_text(encoding="utf-8")
    hostile = [line % _T.format(n) for n, line in enumerate(HOSTILE)]
    path = folder / "hostile.jsonl"
    folder.mkdir()
    path.write_text(base + "".join(f"{line}\n" for line in hostile), encoding="utf-8")
    return path


@pytest.mark.parametrize("reopen", [False, True], ids=["one-store", "reopened-each-batch"])
def test_hostile_lines_map_to_the_records_an_import_writes(tmp_path: Path, reopen: bool) -> None:
    """Every record but the verbatim entries equals the import's, line numbers included."""
    path = _transcript(tmp_path / "t")
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    store = LoopscribeSessionStore(tmp_path / "store")
    try:
        for start in range(0, len(entries), 3):
            batch = cast(list[SessionStoreEntry], entries[start : start + 3])
            asyncio.run(store.append(KEY, batch))
            if reopen:
                store.close()
                store = LoopscribeSessionStore(tmp_path / "store")
        assert asyncio.run(store.load(KEY)) is not None
        assert store.mapping_errors == 0
    finally:
        store.close()
    written = store.path(KEY["project_key"], KEY["session_id"])
    expected = mapped(imported(path, tmp_path / "import"))
    found = mapped(written)
    assert found == expected
    # The hostile lines were mapped, not just kept: a tool call, invalid lines and messages.
    kinds = {item[0] for item in found[0] if b"h-" in item[3] or b"invalid_line" in item[3]}
    assert {"tool_exec_start", "message_end", "source_event"} <= kinds

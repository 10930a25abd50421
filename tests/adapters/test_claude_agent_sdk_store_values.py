"""LoopscribeSessionStore with values JSON cannot hold: recorded, loaded back, never a failure.

An entry is data from outside. Whatever it holds, ``append`` records it,
``close`` fsyncs and releases the file, the summary file is written, other
processes list the session, and ``load`` returns what was appended, except
for the values the README names, which come back as it says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import math
import uuid
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from loopscribe import SessionLockedError, Workspace, read
from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

KEY: SessionKey = {"project_key": "-home-user-project", "session_id": "values"}
MAX_DEPTH = 400
"""Levels of nesting an entry keeps, as the README says."""


def prompt(text: Any, uuid_: str = "u1") -> dict[str, Any]:
    """A user prompt entry, as the first line of a transcript."""
    return {
        "type": "user",
        "uuid": uuid_,
        "sessionId": "values",
        "timestamp": "2024-05-01T10:00:00.000Z",
        "message": {"role": "user", "content": text},
    }


def nested(depth: int) -> list[Any]:
    """Lists nested ``depth`` levels deep."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def same(found: Any, wanted: Any) -> bool:
    """Deep equality in which ``nan`` equals ``nan`` and types must match (a tuple is no list)."""
    if isinstance(wanted, float) and math.isnan(wanted):
        return isinstance(found, float) and math.isnan(found)
    if type(found) is not type(wanted):
        return False
    if isinstance(wanted, dict):
        if len(found) != len(wanted):
            return False
        for (fk, fv), (wk, wv) in zip(found.items(), wanted.items(), strict=True):
            if not (same(fk, wk) and same(fv, wv)):
                return False
        return True
    if isinstance(wanted, list):
        return len(found) == len(wanted) and all(map(same, found, wanted))
    return bool(found == wanted)


# Values JSON (and so the SDK's own transcript) can carry, plus what Python's json
# module writes and reads beyond it: each must load back exactly.
EXACT: dict[str, Any] = {
    "lone surrogate": "a \ud800 b \udfff",
    "surrogate pair as two code points": "\ud83d\ude00",
    "inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
    "-0.0": -0.0,
    "tiny float": 5e-324,
    "64-bit edges": [-(2**63), 2**64 - 1, 2**63],
    "huge int": 2**200,
    "huge negative int": -(10**5000),
    "int keys": {1: "a", 2: {3: "b"}},
    "mixed keys": {None: 1, True: 2, 1.5: 3, math.inf: 4, "s": 5},
    "surrogate key": {"k\udc80": "v"},
    "reserved keys": {"$ls": {"$ls": 1}, "$sdk": "dict", "$$ls": 2},
    "tag look-alike": {"$sdk": "str", "utf8": "YQ=="},
    "deep, at the limit": nested(MAX_DEPTH - 3),
    "NUL and controls": "a\0b\x1b[31m\u2028",
    "empty": [{}, [], ""],
}


@dataclasses.dataclass
class _Point:
    x: int


class _Color(enum.Enum):
    RED = "red"


# Values that are not JSON: as the README says, their JSON form or a diagnostic.
AS_JSON: dict[str, tuple[Any, Any]] = {
    "tuple": ((1, "a"), [1, "a"]),
    "datetime": (datetime.datetime(2024, 5, 1, 10, 0), "2024-05-01T10:00:00"),
    "date": (datetime.date(2024, 5, 1), "2024-05-01"),
    "time": (datetime.time(10, 0, 30), "10:00:30"),
    "uuid": (uuid.UUID(int=7), "00000000-0000-0000-0000-000000000007"),
    "enum": (_Color.RED, "red"),
}
AS_DIAGNOSTIC: dict[str, Any] = {
    "bytes": b"\x00\xff",
    "bytearray": bytearray(b"ab"),
    "memoryview": memoryview(b"ab"),
    "set": {1, 2},
    "tuple key": {(1, 2): "v"},
    "dataclass": _Point(1),
    "object": object(),
    "too deep": nested(MAX_DEPTH + 1),
}


def _self_containing() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def run_scenario(folder: Path, entries: list[Any]) -> list[Any] | None:
    """Append ``entries`` (first in their own batch), close, and load from a new store."""

    async def go(store: LoopscribeSessionStore) -> None:
        await store.append(KEY, cast(list[SessionStoreEntry], entries[:1]))
        await store.append(KEY, cast(list[SessionStoreEntry], entries[1:]))

    store = LoopscribeSessionStore(folder)
    asyncio.run(go(store))
    store.close()  # must not raise: data is never the file's failure
    with LoopscribeSessionStore(folder) as again:
        return cast(list[Any] | None, asyncio.run(again.load(KEY)))


def test_a_lone_surrogate_in_the_first_prompt_closes_and_lists(tmp_path: Path) -> None:
    """``close`` fsyncs and releases the file; other processes list the session and its prompt."""
    first = prompt("fix the bug in caf\udce9.py")
    store = LoopscribeSessionStore(tmp_path)
    asyncio.run(store.append(KEY, cast(list[SessionStoreEntry], [first])))
    store.close()
    path = store.path(KEY["project_key"], KEY["session_id"])
    # Released: no writer holds the file, so the workspace does not call it running.
    [listed] = Workspace(tmp_path).list()
    assert listed.status != "running"
    with LoopscribeSessionStore(tmp_path) as other:
        summaries = asyncio.run(other.list_session_summaries(KEY["project_key"]))
        sessions = asyncio.run(other.list_sessions(KEY["project_key"]))
        assert asyncio.run(other.load(KEY)) == [first]
        # Writable again: the lock was released by close.
        asyncio.run(other.append(KEY, [cast(SessionStoreEntry, prompt("next", "u2"))]))
    assert [s["session_id"] for s in sessions] == ["values"]
    assert summaries[0]["data"]["first_prompt"] == "fix the bug in caf\udce9.py"
    assert len({r.session_id for r in read(path, decode=False)}) == 1


@pytest.mark.parametrize("name", list(EXACT))
def test_values_json_can_carry_load_back_exactly(name: str, tmp_path: Path) -> None:
    """Each value, in the first prompt and deep in a later entry, loads back exactly."""
    value = EXACT[name]
    entries = [prompt(value), {"type": "x", "uuid": "u2", "deep": {"in": [value]}}, {"v": value}]
    found = run_scenario(tmp_path, entries)
    assert found is not None
    assert same(found, entries), (found, entries)


def test_values_that_are_not_json_come_back_as_the_readme_says(tmp_path: Path) -> None:
    """Tuples, dates, UUIDs, enums load as their JSON form; the rest as a diagnostic alone."""
    entry: dict[str, Any] = {"type": "x", "uuid": "u1", "keep": "this"}
    entry |= {name: pair[0] for name, pair in AS_JSON.items()}
    entry |= AS_DIAGNOSTIC
    entry["contains itself"] = _self_containing()
    found = run_scenario(tmp_path, [prompt("hello"), entry])
    assert found is not None
    back = found[1]
    assert back["keep"] == "this"
    for name, (_, json_form) in AS_JSON.items():
        assert back[name] == json_form, name
    for name in AS_DIAGNOSTIC:
        diagnostic = back[name]
        while isinstance(diagnostic, list):  # "too deep": the innermost level alone
            diagnostic = diagnostic[0]
        assert list(diagnostic) == ["snapshot_error"], name
        assert "could not be encoded" in diagnostic["snapshot_error"]
    assert back["contains itself"][0] == 1
    assert list(back["contains itself"][1]) == ["snapshot_error"]


def test_odd_entries_never_stop_append_close_or_the_summary(tmp_path: Path) -> None:
    """Entries that are not objects, odd timestamps and odd summary fields are all recorded."""
    entries: list[Any] = [
        prompt({"text": "\ud800"}),
        ["not", "an", "object"],
        "a string",
        None,
        2**100,
        {"type": "user", "timestamp": "0001-01-01T00:00:00+14:00", "message": {"content": "x"}},
        {"type": "user", "timestamp": "9999-12-31T23:59:59-14:00", "uuid": "late"},
        {"type": "summary", "summary": "\udfff", "leafUuid": "x"},
        {"type": "custom-title", "customTitle": "t\ud800", "cwd": 5, "gitBranch": ["b"]},
        {"type": "tag", "tag": "\ud800"},
        {
            "type": "assistant",
            "message": {"id": 2**70, "content": [{"type": "text", "text": math.nan}]},
        },
    ]
    found = run_scenario(tmp_path, entries)
    assert found is not None
    assert same(found, entries)
    with LoopscribeSessionStore(tmp_path) as other:
        [summary] = asyncio.run(other.list_session_summaries(KEY["project_key"]))
    assert summary["data"]["custom_title"] == "t\ud800"
    assert summary["data"]["tag"] == "\ud800"


def test_a_store_file_held_elsewhere_refuses_the_append_and_keeps_nothing(tmp_path: Path) -> None:
    """While another handle holds the file, append raises and writes nothing; later it goes on."""
    with LoopscribeSessionStore(tmp_path) as first:
        asyncio.run(first.append(KEY, [cast(SessionStoreEntry, prompt("one"))]))
        with LoopscribeSessionStore(tmp_path) as second:
            with pytest.raises(SessionLockedError):
                asyncio.run(second.append(KEY, [cast(SessionStoreEntry, prompt("two", "u2"))]))
            first.close()
            asyncio.run(second.append(KEY, [cast(SessionStoreEntry, prompt("three", "u3"))]))
            loaded = asyncio.run(second.load(KEY))
    assert loaded == [prompt("one"), prompt("three", "u3")]


def test_the_stored_form_of_plain_entries_is_plain_json(tmp_path: Path) -> None:
    """Plain JSON entries are kept as objects in the record, readable by any JSON tool."""
    entry = prompt("hello")
    run_scenario(tmp_path, [entry])
    path = next(tmp_path.glob("*.jsonl"))
    stored = [r.data for r in read(path, decode=False) if r.type == "source_entry"]
    assert stored == [{"subpath": None, "entry": entry, "last": True}]
    assert orjson.loads(orjson.dumps(stored[0]["entry"])) == entry

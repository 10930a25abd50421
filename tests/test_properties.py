"""Universal rules, checked with Hypothesis: codec round-trip and truncation recovery.

Files live on tmpfs (``/dev/shm``) when there is one: these tests are about
the format, not durability (``test_crash.py`` covers that), and there an
fsync costs nothing, so many more examples fit in a few seconds.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopscribe import (
    AssistantMessage,
    EncodeError,
    Event,
    Execution,
    FormatError,
    ImageContent,
    Record,
    Session,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    read,
    verify,
)

_SHM = Path("/dev/shm")
_SCRATCH_ROOT = str(_SHM) if _SHM.is_dir() and os.access(_SHM, os.W_OK) else None

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def _scratch() -> Iterator[Path]:
    """A fresh folder per Hypothesis example (function-scoped fixtures are not allowed)."""
    with tempfile.TemporaryDirectory(prefix="loopscribe-prop-", dir=_SCRATCH_ROOT) as folder:
        yield Path(folder)


# -- strategies ----------------------------------------------------------------

# "$ls" is the codec's reserved tag key; see test_reserved_tag_key_in_plain_data_is_refused.
_keys = st.text(max_size=8).filter(lambda key: key != "$ls")
_texts = st.text(max_size=24)
# orjson holds exactly the signed and unsigned 64-bit range.
_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_floats = st.floats(allow_nan=False, allow_infinity=False)
_json_leaves = st.none() | st.booleans() | _ints | _floats | _texts


def _json_lists_only() -> st.SearchStrategy[Any]:
    """Plain JSON values without tuples, for fields whose tuples would come back as lists."""

    def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4)

    return st.recursive(_json_leaves, containers, max_leaves=12)


_plain_json = _json_lists_only()
_opt_texts = st.none() | _texts
_usage = st.builds(
    Usage,
    input_tokens=st.integers(0, 2**63 - 1),
    output_tokens=st.integers(0, 2**63 - 1),
    cache_read_tokens=st.integers(0, 2**63 - 1),
    cache_write_tokens=st.integers(0, 2**63 - 1),
)
_content = st.one_of(
    st.builds(TextContent, text=_texts),
    st.builds(ImageContent, data=_texts, mime_type=_texts),
    st.builds(ThinkingContent, thinking=_texts, signature=_opt_texts),
    st.builds(
        ToolCall,
        id=_texts,
        name=_texts,
        arguments=st.dictionaries(_keys, _plain_json, max_size=3),
    ),
)
_contents = st.lists(_content, max_size=3).map(tuple)
_messages = st.one_of(
    st.builds(SystemMessage, content=_texts),
    st.builds(UserMessage, content=_texts | _contents),
    st.builds(
        AssistantMessage,
        content=_contents,
        model=_opt_texts,
        provider=_opt_texts,
        usage=st.none() | _usage,
        stop_reason=_opt_texts,
        error_message=_opt_texts,
    ),
    st.builds(
        ToolResultMessage,
        tool_call_id=_texts,
        tool_name=_texts,
        content=_contents,
        is_error=st.booleans(),
        details=_plain_json | _usage,
    ),
)


def _data_values() -> st.SearchStrategy[Any]:
    """Plain values with built-in messages anywhere inside, as hosts record them."""

    def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return (
            st.lists(children, max_size=4)
            | st.lists(children, max_size=4).map(tuple)
            | st.dictionaries(_keys, children, max_size=4)
        )

    return st.recursive(_json_leaves | _messages | _usage, containers, max_leaves=10)


_data = st.dictionaries(_keys, _data_values(), max_size=4)
_non_empty = st.text(min_size=1, max_size=8)
_executions = st.builds(
    Execution,
    id=_non_empty,
    kind=_non_empty,
    attempt=st.integers(1, 2**63 - 1),
    parent_id=st.none() | _non_empty,
)
_offsets = st.builds(timezone, st.timedeltas(timedelta(hours=-23), timedelta(hours=23)))
# Naive timestamps are local time; the extremes leave room for the UTC shift.
_timestamps = st.none() | st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.one_of(st.none(), _offsets),
)
_events = st.builds(
    Event,
    type=st.just("note"),
    execution=st.none() | _executions,
    data=_data,
    timestamp=_timestamps,
)
# Cheaper to generate: truncation cares about line shapes and lengths, not deep values.
_light_events = st.builds(
    Event,
    type=st.sampled_from(["note", "tool_exec_end"]),
    execution=st.none() | _executions,
    data=st.dictionaries(_keys, _json_leaves | _messages, max_size=3),
)


# -- helpers ------------------------------------------------------------------


def _as_read(value: Any) -> Any:
    """What reading gives back for a recorded value: plain tuples become lists."""
    if isinstance(value, list | tuple):
        return [_as_read(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_read(item) for key, item in value.items()}
    return value


def _assert_same(actual: Any, expected: Any, where: str = "data") -> None:
    """Equal and of the same types all the way down (``==`` alone lets 1 pass for 1.0)."""
    assert type(actual) is type(expected), f"{where}: {actual!r} is not a {type(expected)}"
    if isinstance(expected, dict):
        assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            _assert_same(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected), f"{where}: {actual!r} != {expected!r}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _assert_same(a, e, f"{where}[{i}]")
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            _assert_same(getattr(actual, f.name), getattr(expected, f.name), f"{where}.{f.name}")
    elif isinstance(expected, float):
        # Also tells 0.0 from -0.0, which == does not.
        assert math.copysign(1, actual) == math.copysign(1, expected), where
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _without_data(record: Record) -> Record:
    return dataclasses.replace(record, data={})


def _write_session(
    path: Path, events: list[Event], *, checkpoint_every: int = 0, chain: bool = False
) -> None:
    """Record ``events`` into a new file, over two runs, with checkpoints if asked."""
    half = len(events) // 2
    with Session.create(path, metadata={"title": "property ✓"}, chain=chain) as session:
        for part in (events[:half], events[half:]):
            with session.begin_run() as run:
                for n, event in enumerate(part, 1):
                    run.record(event)
                    if checkpoint_every and n % checkpoint_every == 0:
                        run.save_checkpoint({"n": n, "note": "snapshot ✓\n"})


# -- codec round-trip ---------------------------------------------------------


@FAST
@given(events=st.lists(_events, min_size=1, max_size=4))
def test_recorded_events_read_back_equal(events: list[Event]) -> None:
    """Data, execution and timestamp of every recorded event read back equal to the input."""
    with _scratch() as folder:
        path = folder / "s.jsonl"
        with Session.create(path) as session, session.begin_run() as run:
            live = [run.record(event) for event in events]
        notes = [record for record in read(path) if record.type == "note"]
    assert len(notes) == len(events)
    for record, written, event in zip(notes, live, events, strict=True):
        assert written is not None
        # The live Record and the one read from disk differ only in how data is held.
        assert _without_data(record) == _without_data(written)
        # Data with typed values is a LazyData mapping; its decoded form is a dict.
        _assert_same(dict(record.data), _as_read(event.data))
        assert record.execution == event.execution
        assert record.ts.tzinfo is UTC
        if event.timestamp is not None:
            assert record.ts == event.timestamp.astimezone(UTC)


@FAST
@given(messages=st.lists(_messages, min_size=1, max_size=4))
def test_builtin_messages_read_back_as_equal_typed_values(messages: list[Any]) -> None:
    """Built-in message dataclasses recorded via ``message_end`` read back equal and typed."""
    with _scratch() as folder:
        path = folder / "s.jsonl"
        with Session.create(path) as session, session.begin_run() as run:
            for message in messages:
                run.record(Event("message_end", None, {"message": message}))
        stored = [r.data["message"] for r in read(path) if r.type == "message_end"]
    assert len(stored) == len(messages)
    for actual, expected in zip(stored, messages, strict=True):
        _assert_same(actual, expected, "message")
        assert actual == expected


def _record_once(path: Path, data: dict[str, Any]) -> bool:
    """Record one ``note`` into a new file and close it; whether the data was refused."""
    session = Session.create(path)
    run = session.begin_run()
    try:
        run.record(Event("note", None, data))
    except EncodeError:
        # A refusal is for this record only: the session closes cleanly.
        session.close()
        return True
    session.close()
    return False


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_never_make_a_file_unreadable(tmp_path: Path, value: float) -> None:
    """NaN and infinities, which JSON cannot hold, are refused or stored as null, never as NaN."""
    path = tmp_path / "s.jsonl"
    refused = _record_once(path, {"x": value, "ok": 1})
    notes = [r.data for r in read(path) if r.type == "note"]
    assert notes == ([] if refused else [{"x": None, "ok": 1}])


@pytest.mark.parametrize(
    "data",
    [
        {"x": {"$ls": "text", "text": "hi"}},
        {"y": [{"$ls": "not-a-registered-type"}]},
        {"$ls": "user", "content": "top level"},
        {"$ls": {"$ls": "$dict", "$$ls": "assistant"}, "$$ls": [{"$ls": None}]},
    ],
)
def test_reserved_tag_key_in_plain_data_reads_back_equal(
    tmp_path: Path, data: dict[str, Any]
) -> None:
    """Plain data using the reserved '$ls' key is escaped: it reads back equal, never retyped."""
    path = tmp_path / "s.jsonl"
    assert not _record_once(path, data)
    assert [r.data for r in read(path) if r.type == "note"] == [data]


_tag_prone = st.recursive(
    _json_leaves,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["$ls", "$$ls", "$$$ls", "text", "role"]) | _keys,
            children | st.sampled_from(["$dict", "text", "assistant"]),
            max_size=3,
        )
    ),
    max_leaves=8,
)


@FAST
@given(data=st.dictionaries(st.sampled_from(["$ls", "$$ls", "a"]), _tag_prone, max_size=2))
def test_data_using_the_reserved_key_round_trips(data: dict[str, Any]) -> None:
    """Recording never refuses plain JSON, whatever keys it uses; it reads back as given."""
    with _scratch() as folder:
        path = folder / "s.jsonl"
        refused = _record_once(path, data)
        notes = [r.data for r in read(path) if r.type == "note"]
    assert not refused
    assert notes == [_as_read(data)]


# -- truncation ---------------------------------------------------------------


def _check_cut(
    original: bytes, records: list[Record], cut: int, path: Path, *, chain: bool = False
) -> None:
    """Cut ``original`` at ``cut``; read and Session.open must give the complete records.

    After appending a run through the reopened handle, a hash-chained file
    must verify whole: the chain continues from the last complete line.
    """
    complete = [r for r in records if r.end_offset <= cut]
    boundary = complete[-1].end_offset if complete else 0
    path.write_bytes(original[:cut])
    assert list(read(path)) == complete, f"read after a cut at byte {cut}"
    if not complete:
        # Not even session_start survived: there is no session to reopen.
        with pytest.raises(FormatError):
            Session.open(path)
        return
    with Session.open(path) as session:
        assert path.read_bytes() == original[:boundary], f"open after a cut at byte {cut}"
        assert session.next_seq == len(complete)
        assert session.size == boundary
        assert session.id == records[0].session_id
        with session.begin_run():
            pass
    reopened = list(read(path))
    assert reopened[: len(complete)] == complete
    appended = ["run_start", "run_close"] + (["session_close"] if chain else [])
    assert [r.seq for r in reopened] == list(range(len(complete) + len(appended)))
    assert [r.type for r in reopened[len(complete) :]] == appended
    if chain:
        report = verify(path)
        assert report.broken is None, f"cut at byte {cut}: {report.broken}"
        assert report.sealed
        assert report.records == len(reopened)


@pytest.mark.parametrize("chain", [False, True], ids=["plain", "chained"])
def test_every_truncation_reopens_to_the_complete_records_before_the_cut(chain: bool) -> None:
    """For a cut at every byte offset, reading and reopening give exactly the complete records."""
    events = [
        Event("message_end", None, {"message": UserMessage('grüße "quoted"\nnew line 😀')}),
        Event("tool_exec_start", Execution("call_1", "tool", parent_id="turn_1"), {"args": [1]}),
        Event("tool_exec_end", Execution("call_1", "tool"), {"result": "€" * 4, "n": 1.5}),
        Event(
            "message_end",
            Execution("m", "model", attempt=2),
            {"message": AssistantMessage((TextContent("ok"),), usage=Usage(3, 4))},
        ),
        Event("note", None, {}),
    ]
    with _scratch() as folder:
        source = folder / "source.jsonl"
        _write_session(source, events, checkpoint_every=2, chain=chain)
        original = source.read_bytes()
        records = list(read(source))
        assert len(records) > 8
        for cut in range(len(original) + 1):
            _check_cut(original, records, cut, folder / "cut.jsonl", chain=chain)


@FAST
@given(events=st.lists(_light_events, min_size=1, max_size=6), chain=st.booleans(), data=st.data())
def test_a_chosen_truncation_reopens_to_the_complete_records(
    events: list[Event], chain: bool, data: st.DataObject
) -> None:
    """For generated files and a chosen cut, reopening keeps exactly the complete lines."""
    with _scratch() as folder:
        source = folder / "source.jsonl"
        _write_session(source, events, checkpoint_every=3, chain=chain)
        original = source.read_bytes()
        records = list(read(source))
        newlines = [r.end_offset for r in records]
        # Shrink toward the interesting places: on, just before and just after a line end.
        near_end = st.sampled_from(newlines).flatmap(lambda end: st.integers(end - 2, end + 1))
        cut = data.draw(
            st.integers(0, len(original)) | near_end.filter(lambda c: 0 <= c <= len(original)),
            label="cut",
        )
        _check_cut(original, records, cut, folder / "cut.jsonl", chain=chain)

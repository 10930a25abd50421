"""Corruption inside committed data: single-byte flips in complete lines of a real session file."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import (
    AssistantMessage,
    CorruptRecordError,
    DecodeError,
    Event,
    Execution,
    FormatError,
    Session,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    read,
)

SEED = 20261129
FLIPS = 1000


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    """A temporary folder on /dev/shm when it is writable, else in the default temp dir."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="loopscribe-corrupt-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def record_session(path: Path, rng: random.Random) -> bytes:
    """Record a realistic session of mixed record sizes and return the file's bytes."""
    with Session.create(path, metadata={"host": "test", "model": "m-1"}) as session:
        for turn in range(40):
            with session.begin_run() as run:
                ex = Execution(f"turn_{turn}", "model")
                run.record(Event("turn_start", ex, {"turn": turn}))
                run.record(Event("message_end", ex, {"message": UserMessage(f"question {turn}")}))
                calls = tuple(
                    ToolCall(f"call_{turn}_{i}", "search", {"q": f"q{i}", "n": i})
                    for i in range(rng.randint(0, 2))
                )
                text = "ünïcødé answer " * rng.randint(1, 60)
                reply = AssistantMessage(
                    (TextContent(text), *calls),
                    model="m-1",
                    usage=Usage(input_tokens=turn * 10, output_tokens=len(text)),
                    stop_reason="tool_use" if calls else "end_turn",
                )
                run.record(Event("message_end", ex, {"message": reply}))
                for call in calls:
                    tex = Execution(call.id, "tool", parent_id=ex.id)
                    run.record(Event("tool_exec_start", tex, {"tool": call.name, "args": {"q": 1}}))
                    output = "x" * rng.choice([0, 5, 200, 3000])
                    result = ToolResultMessage(call.id, call.name, (TextContent(output),))
                    run.record(Event("tool_exec_end", tex, {"result": result, "ok": True}))
                    run.record(Event("tool_exec_end", tex, {"plain": {"a": [1, 2.5, None]}}))
                run.record(Event("turn_end", ex, {"turn": turn, "tokens": rng.randint(0, 9999)}))
                if turn % 7 == 0:
                    run.save_checkpoint({"turn": turn, "history": ["a", "b"] * turn})
    return path.read_bytes()


def line_starts(data: bytes) -> list[int]:
    """Byte offsets where each line starts."""
    starts = [0]
    starts.extend(i + 1 for i, b in enumerate(data[:-1]) if b == 0x0A)
    return starts


def line_of(starts: list[int], position: int) -> int:
    """1-based number of the line holding byte ``position`` (a line owns its ``\\n``)."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= position:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1


def same_structure(original: bytes, flipped: bytes) -> bool:
    """Whether ``flipped`` still parses as a record with the original's seq and session_id."""
    try:
        obj: Any = orjson.loads(flipped)
    except orjson.JSONDecodeError:
        return False
    before: dict[str, Any] = orjson.loads(original)
    return (
        type(obj) is dict
        and obj.get("seq") == before["seq"]
        and obj.get("session_id") == before["session_id"]
        and type(obj.get("type")) is str
        and type(obj.get("ts")) is str
    )


def read_all(path: Path) -> int:
    """Read every record; return how many typed values fail to decode on access."""
    failures = 0
    for record in read(path):
        try:
            dict(record.data)
        except DecodeError:
            failures += 1
    return failures


def test_single_byte_flips_are_reported_at_their_line_or_kept_as_valid_records(
    fast_dir: Path,
) -> None:
    """Each flip fails open and read at its line (file unchanged) or leaves a valid record."""
    rng = random.Random(SEED)
    original = record_session(fast_dir / "original.jsonl", rng)
    starts = line_starts(original)
    assert len(starts) > 300
    ends = [*starts[1:], len(original)]
    path = fast_dir / "flipped.jsonl"
    outcomes: Counter[str] = Counter()
    for _ in range(FLIPS):
        position = rng.randrange(len(original) - 1)  # never the final newline
        data = bytearray(original)
        data[position] ^= rng.randrange(1, 256)
        flipped = bytes(data)
        path.write_bytes(flipped)
        number = line_of(starts, position)
        change = f"{original[position]:#x}->{flipped[position]:#x}"
        where = f"flip at byte {position} (line {number}): {change}"
        line_before = original[starts[number - 1] : ends[number - 1]]
        line_after = flipped[starts[number - 1] : ends[number - 1]]
        try:
            list(read(path))
        except FormatError as exc:
            read_error: FormatError | None = exc
        else:
            read_error = None
        try:
            Session.open(path).close()
        except FormatError as exc:
            open_error: FormatError | None = exc
            assert path.read_bytes() == flipped, f"{where}: a failed open changed the file"
        else:
            open_error = None
        if read_error is None:
            assert open_error is None, f"{where}: open refused what read accepts: {open_error}"
            assert flipped[position] != 0x0A, where
            assert original[position] != 0x0A, where
            assert same_structure(line_before, line_after), f"{where}: accepted a changed record"
            outcomes["accepted"] += 1
            if read_all(path):
                outcomes["accepted_but_typed_value_fails_to_decode"] += 1
            continue
        outcomes[f"rejected:{type(read_error).__name__}"] += 1
        # Open checks every line the way read does: it never appends after a line
        # that read would refuse.
        assert open_error is not None, f"{where}: open accepted what read refuses: {read_error}"
        assert type(open_error) is type(read_error), (where, open_error, read_error)
        errors = [read_error, open_error]
        for error in errors:
            if (error.line, error.offset) == (number, starts[number - 1]):
                continue
            # A session_id changed in line 1 is consistent by itself; line 2 disagrees first.
            assert number == 1, (where, error)
            assert same_structure(line_before, line_after), (where, error)
            assert (error.line, error.offset) == (2, starts[1]), (where, error)
            outcomes["line_1_session_id_reported_at_line_2"] += 1
    print(dict(outcomes))
    rejected = sum(v for k, v in outcomes.items() if k.startswith("rejected:"))
    assert rejected + outcomes["accepted"] == FLIPS
    assert rejected > FLIPS // 4
    assert set(outcomes) <= {
        "accepted",
        "accepted_but_typed_value_fails_to_decode",
        "line_1_session_id_reported_at_line_2",
        "open_accepts_what_read_rejects",
        f"rejected:{CorruptRecordError.__name__}",
        "rejected:UnsupportedVersionError",
    }


def test_a_flipped_newline_merges_two_lines_and_is_reported_at_the_first(fast_dir: Path) -> None:
    """Turning a middle line's final newline into another byte is reported at that line."""
    rng = random.Random(SEED + 1)
    original = record_session(fast_dir / "original.jsonl", rng)
    starts = line_starts(original)
    path = fast_dir / "merged.jsonl"
    for number in rng.sample(range(1, len(starts) - 1), 50):
        newline = starts[number] - 1  # the \n that ends line `number`
        assert original[newline] == 0x0A
        data = bytearray(original)
        data[newline] ^= rng.randrange(1, 256)
        flipped = bytes(data)
        path.write_bytes(flipped)
        with pytest.raises(CorruptRecordError) as exc:
            Session.open(path)
        assert (exc.value.line, exc.value.offset) == (number, starts[number - 1])
        assert path.read_bytes() == flipped
        with pytest.raises(CorruptRecordError) as read_exc:
            list(read(path))
        assert (read_exc.value.line, read_exc.value.offset) == (number, starts[number - 1])


def test_open_refuses_a_line_that_read_refuses(fast_dir: Path) -> None:
    """A complete line with an unparsable timestamp is refused by Session.open as by read."""
    path = fast_dir / "bad_ts.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        run.record(Event("turn_start", None, {"turn": 1}))
    lines = path.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[2])
    record["ts"] = "not a timestamp"
    lines[2] = orjson.dumps(record) + b"\n"
    path.write_bytes(b"".join(lines))
    with pytest.raises(CorruptRecordError):
        list(read(path))
    with pytest.raises(CorruptRecordError):
        Session.open(path).close()

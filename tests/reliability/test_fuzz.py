"""Bad input: Hypothesis round-trips, arbitrary bytes for the reader, and hostile files.

Every file given to ``loopscribe.read`` or ``Session.open`` must either be
accepted or fail with a documented error (a ``LoopscribeError`` subclass, or
``FileNotFoundError``): never another exception type, never a hang, never a
``RecursionError``. Reading also touches ``dict(record.data)`` on every
record, because typed values are decoded lazily, on that first access.

``LOOPSCRIBE_FUZZ_EXAMPLES`` sets how many examples each property runs
(default 2000; the suite may raise it to 10,000).
"""

from __future__ import annotations

import functools
import os
import resource
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopscribe import (
    AssistantMessage,
    CorruptRecordError,
    Event,
    Execution,
    LoopscribeError,
    Session,
    TextContent,
    ToolCall,
    Usage,
    UserMessage,
    read,
)
from loopscribe import events as ev

EXAMPLES = int(os.environ.get("LOOPSCRIBE_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Per-file budget: generous for a slow CI machine, far below "hangs".
TIMEOUT_S = 20.0

_SHM = Path("/dev/shm")
_SCRATCH_ROOT = str(_SHM) if _SHM.is_dir() and os.access(_SHM, os.W_OK) else None


class Hang(BaseException):
    """Raised by the watchdog: a read or open took longer than ``TIMEOUT_S``."""


@contextmanager
def watchdog(seconds: float = TIMEOUT_S) -> Iterator[None]:
    """Fail with :class:`Hang` when the block runs longer than ``seconds``."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def scratch() -> Iterator[Path]:
    """A fresh folder per Hypothesis example, on tmpfs when there is one."""
    with tempfile.TemporaryDirectory(prefix="loopscribe-fuzz-", dir=_SCRATCH_ROOT) as folder:
        yield Path(folder)


def read_all(path: Path) -> list[dict[str, Any]]:
    """Read every record and decode its data (the lazy part of reading)."""
    return [dict(record.data) for record in read(path)]


def open_and_close(path: Path) -> None:
    """Open the file for appending (validates, cuts an unfinished tail), then close it."""
    Session.open(path).close()


def outcome(action: Callable[[Path], object], path: Path) -> str:
    """``"accepted"`` or the name of the documented error ``action`` raised on ``path``.

    Anything else (another exception type, ``RecursionError``, a hang) fails the test.
    """
    try:
        with watchdog():
            action(path)
    except (LoopscribeError, FileNotFoundError) as exc:
        return type(exc).__name__
    return "accepted"


def check_file(blob: bytes) -> None:
    """Both entry points either accept ``blob`` or raise a documented error."""
    with scratch() as folder:
        path = folder / "fuzz.jsonl"
        path.write_bytes(blob)
        outcome(read_all, path)
        outcome(open_and_close, path)


# -- (a) round-trips of arbitrary JSON-compatible event data ---------------------

_keys = st.text(max_size=10).filter(lambda key: key != "$ls")
_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
_json = st.recursive(
    _leaves,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(_keys, children, max_size=5),
    max_leaves=20,
)
_data = st.dictionaries(_keys, _json, max_size=6)
_executions = st.none() | st.builds(
    Execution,
    id=st.text(min_size=1, max_size=12),
    kind=st.sampled_from(["model", "tool", "turn", "agent"]),
    attempt=st.integers(1, 5),
    parent_id=st.none() | st.text(min_size=1, max_size=12),
)
# Host-defined types: the built-in ones (model_request, ...) are reshaped before the write.
_event_types = st.text(max_size=20).map(lambda t: f"host.{t}")


@FUZZ
@given(events=st.lists(st.tuples(_event_types, _executions, _data), min_size=1, max_size=4))
def test_arbitrary_json_data_reads_back_equal(
    events: list[tuple[str, Execution | None, dict[str, Any]]],
) -> None:
    """Arbitrary JSON-compatible event data is read back equal, with its type and execution."""
    with scratch() as folder:
        path = folder / "round.jsonl"
        with Session.create(path) as session, session.begin_run() as run:
            for kind, execution, data in events:
                run.record(Event(kind, execution, data))
        with watchdog():
            records = list(read(path))[2:-1]  # without session_start, run_start, run_close
        assert [(r.type, r.execution, dict(r.data)) for r in records] == events


# -- (b) arbitrary bytes ---------------------------------------------------------


@functools.cache
def valid_file() -> bytes:
    """A small, real session file holding typed values (messages, tool calls, usage)."""
    with tempfile.TemporaryDirectory(prefix="loopscribe-fuzz-", dir=_SCRATCH_ROOT) as folder:
        path = Path(folder) / "valid.jsonl"
        model = Execution("model_1", "model", parent_id="turn_1")
        tool = Execution("call_1", "tool", parent_id="turn_1")
        call = ToolCall("call_1", "grep", {"pattern": "x"})
        reply = AssistantMessage(
            content=(TextContent("hi"), call), model="m", usage=Usage(3, 4), stop_reason="tool"
        )
        with Session.create(path) as session, session.begin_run() as run:
            run.record(ev.model_request(model, [UserMessage("hello")], config={"top_p": 1}))
            run.record(ev.model_exec_end(model, message=reply))
            run.record(ev.message_end(model, reply))
            run.record(ev.tool_exec_start(tool, "grep", {"pattern": "x"}))
            run.record(ev.tool_exec_end(tool, "grep", "no match", details={"n": [1, 2]}))
            run.save_checkpoint({"turn": 1, "messages": [UserMessage("hello")]})
        return path.read_bytes()


@st.composite
def mutated_files(draw: st.DrawFn) -> bytes:
    """The valid file with a few slices replaced, removed, duplicated or cut short."""
    blob = bytearray(valid_file())
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, len(blob)))
        end = draw(st.integers(start, min(len(blob), start + 64)))
        how = draw(st.sampled_from(["replace", "delete", "duplicate", "truncate"]))
        if how == "replace":
            blob[start:end] = draw(st.binary(max_size=16))
        elif how == "delete":
            del blob[start:end]
        elif how == "duplicate":
            blob[start:start] = blob[start:end]
        else:
            del blob[start:]
    return bytes(blob)


_SID = "a" * 32
# Plausible and implausible timestamps; see test_out_of_range_timestamp_is_a_format_error
# for the ones (year 1 / 9999 with an offset) that are kept out of this strategy.
_timestamps = st.sampled_from(
    ["2026-11-29T07:00:00.123456Z", "2026-11-29T07:00:00+02:00", "2026-11-29", "", "Z", "soon"]
) | st.text(max_size=30)
_tag_names = st.sampled_from(["user", "assistant", "tool_result", "text", "tool_call", "usage"])
_tag_names = _tag_names | st.text(max_size=10)


def _typed_values(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(
        lambda name, fields: {"$ls": name, **fields},
        _tag_names,
        st.dictionaries(
            st.sampled_from(["content", "role", "text", "id", "name", "arguments", "model"]),
            children,
            max_size=4,
        ),
    )


_hostile_json = st.recursive(
    _leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.just("$ls"), children, max_size=4)
        | _typed_values(children)
    ),
    max_leaves=20,
)
_hostile_executions = (
    st.none()
    | _hostile_json
    | st.fixed_dictionaries(
        {"id": _hostile_json, "kind": _hostile_json},
        optional={"attempt": _hostile_json, "parent_id": _hostile_json},
    )
)


@st.composite
def record_like_files(draw: st.DrawFn) -> bytes:
    """A file of record-shaped JSON lines whose fields and data are arbitrary."""
    start = {
        "session_id": draw(st.just(_SID) | _hostile_json),
        "seq": draw(st.just(0) | _hostile_json),
        "type": draw(st.just("session_start") | _hostile_json),
        "ts": draw(st.just("2026-11-29T07:00:00Z") | _timestamps),
        "data": draw(st.just({"format_version": 1}) | _hostile_json),
    }
    lines = [orjson.dumps(start)]
    for seq in range(1, draw(st.integers(0, 4)) + 1):
        line: dict[str, Any] = {
            "session_id": draw(st.just(_SID) | _hostile_json),
            "seq": draw(st.just(seq) | _hostile_json),
            "type": draw(st.sampled_from(["note", "checkpoint", "run_start", "run_close"])),
            "ts": draw(_timestamps),
        }
        if draw(st.booleans()):
            line["run_id"] = draw(st.just("r" * 32) | _hostile_json)
        if draw(st.booleans()):
            line["execution"] = draw(_hostile_executions)
        line["data"] = draw(_hostile_json)
        lines.append(orjson.dumps(line))
    blob = b"\n".join(lines)
    return blob + draw(st.sampled_from([b"\n", b"", b"\r\n", b"\n{", b"\n\n"]))


@FUZZ
@given(blob=st.binary(max_size=2048) | mutated_files() | record_like_files())
def test_arbitrary_bytes_are_accepted_or_a_documented_error(blob: bytes) -> None:
    """read and Session.open accept arbitrary bytes or raise a documented error, never hang."""
    check_file(blob)


# -- explicit hostile files ------------------------------------------------------

_HEADER = (
    b'{"session_id":"' + _SID.encode() + b'","seq":0,"type":"session_start",'
    b'"ts":"2026-11-29T07:00:00.000000Z","data":{"format_version":1}}\n'
)


def _line(data: bytes, *, seq: int = 1, ts: bytes = b"2026-11-29T07:00:01.000000Z") -> bytes:
    return (
        b'{"session_id":"' + _SID.encode() + b'","seq":' + str(seq).encode() + b',"type":"note",'
        b'"ts":"' + ts + b'","data":' + data + b"}\n"
    )


# Each case: the file, then what read and Session.open actually do with it today.
_CASES: dict[str, tuple[bytes, str, str]] = {
    "invalid_utf8": (_HEADER + _line(b'{"t":"\xff\xfe"}'), "CorruptRecordError", ""),
    "utf8_bom": (b"\xef\xbb\xbf" + _HEADER, "CorruptRecordError", ""),
    "crlf_line_endings": (
        (_HEADER + _line(b'{"t":"x"}')).replace(b"\n", b"\r\n"),
        "accepted",
        "",
    ),
    "nul_in_string": (_HEADER + _line(b'{"t":"a\x00b"}'), "CorruptRecordError", ""),
    "nul_line": (_HEADER + b"\x00" * 64 + b"\n", "CorruptRecordError", ""),
    "nul_unfinished_tail": (_HEADER + b"\x00" * 4096, "accepted", ""),
    "nan_literal": (_HEADER + _line(b'{"x":NaN}'), "CorruptRecordError", ""),
    "infinity_literal": (_HEADER + _line(b'{"x":Infinity}'), "CorruptRecordError", ""),
    "negative_infinity_literal": (_HEADER + _line(b'{"x":-Infinity}'), "CorruptRecordError", ""),
    "overflowing_number": (_HEADER + _line(b'{"x":1e400}'), "CorruptRecordError", ""),
    # orjson keeps the last of duplicate keys; the file is accepted as if written so.
    "duplicate_data_keys": (_HEADER + _line(b'{"x":1,"x":2}'), "accepted", ""),
    "duplicate_seq_keys": (
        _HEADER + _line(b"{}").replace(b'"seq":1,', b'"seq":1,"seq":7,'),
        "CorruptRecordError",
        "",
    ),
    "lone_high_surrogate": (_HEADER + _line(b'{"t":"\\ud800"}'), "CorruptRecordError", ""),
    "lone_low_surrogate": (_HEADER + _line(b'{"t":"\\udc00"}'), "CorruptRecordError", ""),
    "surrogate_as_utf8_bytes": (_HEADER + _line(b'{"t":"\xed\xa0\x80"}'), "CorruptRecordError", ""),
    "million_nested_lists": (_HEADER + _line(b"[" * 10**6), "CorruptRecordError", ""),
    "million_nested_objects": (_HEADER + _line(b'{"a":' * 10**6), "CorruptRecordError", ""),
    "million_nested_unfinished_tail": (_HEADER + b"[" * 10**6, "accepted", ""),
    "empty_file": (b"", "accepted", "FormatError"),
    "only_newlines": (b"\n\n", "CorruptRecordError", ""),
    "unknown_type_tag": (_HEADER + _line(b'{"m":{"$ls":"nope"}}'), "DecodeError", "accepted"),
    "bad_fields_for_tag": (
        _HEADER + _line(b'{"m":{"$ls":"user","x":1}}'),
        "DecodeError",
        "accepted",
    ),
    "format_version_2": (
        _HEADER.replace(b'"format_version":1', b'"format_version":2'),
        "UnsupportedVersionError",
        "",
    ),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_hostile_file_has_the_recorded_outcome(name: str, tmp_path: Path) -> None:
    """Each hostile file is accepted or refused exactly as recorded here, by both entry points."""
    blob, read_outcome, open_outcome = _CASES[name]
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(blob)
    assert outcome(read_all, path) == read_outcome
    path.write_bytes(blob)
    assert outcome(open_and_close, path) == (open_outcome or read_outcome)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    """A path that does not exist gives FileNotFoundError from both entry points."""
    path = tmp_path / "absent.jsonl"
    assert outcome(read_all, path) == "FileNotFoundError"
    assert outcome(open_and_close, path) == "FileNotFoundError"


def test_crlf_file_keeps_its_records_and_accepts_appends(tmp_path: Path) -> None:
    """A CRLF file reads with its data intact, and a reopened session appends after it."""
    path = tmp_path / "crlf.jsonl"
    path.write_bytes((_HEADER + _line(b'{"t":"x"}')).replace(b"\n", b"\r\n"))
    assert read_all(path) == [{"format_version": 1}, {"t": "x"}]
    with Session.open(path) as session, session.begin_run() as run:
        run.record(Event("note", None, {"t": "y"}))
    assert read_all(path)[-2] == {"t": "y"}


@pytest.mark.slow
def test_hundred_megabyte_line_reads_in_bounded_memory() -> None:
    """A valid 100 MB line is read and reopened with peak memory bounded by a few copies of it."""
    size = 100 * 2**20
    with scratch() as folder:
        path = folder / "huge.jsonl"
        with path.open("wb") as out:
            out.write(_HEADER)
            out.write(b'{"session_id":"' + _SID.encode() + b'","seq":1,"type":"note",')
            out.write(b'"ts":"2026-11-29T07:00:01Z","data":{"blob":"')
            chunk = b"x" * 2**20
            for _ in range(size // len(chunk)):
                out.write(chunk)
            out.write(b'"}}\n')
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        with watchdog(60):
            sizes = [len(dict(r.data).get("blob", "")) for r in read(path)]
            open_and_close(path)
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert sizes == [0, size]
    assert grown_mib < 600, f"peak memory grew by {grown_mib:.0f} MiB"


# -- edge cases the fuzzing found ------------------------------------------------


def test_deep_data_with_a_typed_value_is_a_documented_error(tmp_path: Path) -> None:
    """Data nested 1000 deep around a typed value decodes or fails with a documented error."""
    depth = 1000
    typed = b'{"$ls":"user","content":"x"}'
    path = tmp_path / "deep.jsonl"
    path.write_bytes(_HEADER + _line(b'{"k":' * depth + typed + b"}" * depth))
    with suppress(LoopscribeError):
        read_all(path)


@pytest.mark.parametrize("ts", [b"0001-01-01T00:00:00+01:00", b"9999-12-31T23:59:59-01:00"])
def test_out_of_range_timestamp_is_a_format_error(ts: bytes, tmp_path: Path) -> None:
    """A timestamp that leaves the datetime range when moved to UTC is a CorruptRecordError."""
    path = tmp_path / "ts.jsonl"
    path.write_bytes(_HEADER + _line(b"{}", ts=ts))
    with pytest.raises(CorruptRecordError):
        read_all(path)

"""Identity, runs, lifecycle, observers and checkpoints of the writer."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import (
    Codec,
    EncodeError,
    Event,
    Execution,
    Record,
    RunStateError,
    Session,
    SessionClosedError,
    SessionExistsError,
    load_checkpoint,
    read,
)
from loopscribe import events as ev
from loopscribe._format import format_ts


def lines(path: Path) -> list[dict[str, object]]:
    """Parse every line of a file with orjson."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_session_id_is_random_hex_and_persists_across_reopen(session_path: Path) -> None:
    """A new session gets 32 random hex digits that reopening keeps."""
    with Session.create(session_path) as first:
        sid = first.id
    assert re.fullmatch(r"[0-9a-f]{32}", sid)
    with Session.open(session_path) as again:
        assert again.id == sid
    with Session.create(session_path.with_name("other.jsonl")) as other:
        assert other.id != sid


def test_each_run_gets_a_fresh_id_also_after_reopen(session_path: Path) -> None:
    """begin_run mints a new run_id every time, including in a reopened file."""
    ids = []
    with Session.create(session_path) as s:
        for _ in range(2):
            with s.begin_run() as run:
                ids.append(run.id)
    with Session.open(session_path) as s, s.begin_run() as run:
        ids.append(run.id)
    assert len(set(ids)) == 3
    starts = [r.run_id for r in read(session_path) if r.type == "run_start"]
    assert starts == ids


def test_only_one_run_may_be_open(session_path: Path) -> None:
    """A second begin_run while a run is open fails; after close it works."""
    with Session.create(session_path) as s:
        run = s.begin_run()
        with pytest.raises(RunStateError, match="still open"):
            s.begin_run()
        run.close()
        s.begin_run().close()


def test_create_refuses_an_existing_path(session_path: Path) -> None:
    """create() never overwrites: an existing file is an error that says what to do."""
    session_path.write_bytes(b"keep me")
    with pytest.raises(SessionExistsError, match=r"Session\.open"):
        Session.create(session_path)
    assert session_path.read_bytes() == b"keep me"


def test_file_layout_matches_format_v1(session_path: Path) -> None:
    """Records have contiguous seq, one session_id, ordered keys and a session_start first."""
    ex = Execution("call_1", "tool", attempt=2, parent_id="turn_1")
    ts = datetime(2026, 11, 29, 7, 0, 0, 123456, tzinfo=UTC)
    with Session.create(session_path) as s, s.begin_run() as run:
        run.record(Event("tool_exec_start", ex, {"tool": "read_file"}, ts))
    objs = lines(session_path)
    assert [o["seq"] for o in objs] == [0, 1, 2, 3]
    assert {o["session_id"] for o in objs} == {s.id}
    assert objs[0]["type"] == "session_start"
    assert objs[0]["data"] == {"format_version": 1}
    assert "run_id" not in objs[0]
    assert list(objs[2]) == ["session_id", "seq", "type", "run_id", "ts", "execution", "data"]
    assert objs[2]["ts"] == "2026-11-29T07:00:00.123456Z"
    assert objs[2]["execution"] == {
        "id": "call_1",
        "kind": "tool",
        "attempt": 2,
        "parent_id": "turn_1",
    }
    assert [o["type"] for o in objs] == [
        "session_start",
        "run_start",
        "tool_exec_start",
        "run_close",
    ]


def test_timestamps_come_from_the_source_and_are_stored_in_utc(session_path: Path) -> None:
    """An event's own timestamp is kept (converted to UTC), not replaced by write time."""
    source = datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    with Session.create(session_path) as s, s.begin_run() as run:
        rec = run.record(Event("turn_start", Execution("t1", "turn"), {"turn": 1}, source))
    assert rec is not None
    assert rec.ts == source
    assert lines(session_path)[2]["ts"] == "2020-01-02T01:04:05.000006Z"
    back = next(r for r in read(session_path) if r.type == "turn_start")
    assert back.ts == source
    assert back.ts.tzinfo is UTC


@pytest.mark.parametrize(
    ("source", "stored"),
    [
        (datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC), "2020-01-02T03:04:05.000000Z"),
        (datetime(2020, 1, 2, 3, 4, 5, 120000, tzinfo=UTC), "2020-01-02T03:04:05.120000Z"),
        (datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "0999-12-31T23:59:59.999999Z"),
    ],
)
def test_stored_times_have_six_fraction_digits_so_they_sort_as_text(
    session_path: Path, source: datetime, stored: str
) -> None:
    """A whole second keeps its .000000: stored times compare correctly as strings."""
    with Session.create(session_path) as s, s.begin_run() as run:
        run.record(Event("turn_start", Execution("t1", "turn"), {"turn": 1}, source))
    assert lines(session_path)[2]["ts"] == stored


def test_record_returns_seq_offset_and_ref(session_path: Path) -> None:
    """The returned Record points at its own line, and ref() combines four coordinates."""
    ex = Execution("call_1", "tool", attempt=3)
    with Session.create(session_path) as s, s.begin_run() as run:
        rec = run.record(Event("tool_exec_start", ex, {"tool": "t"}))
        ref = run.ref(ex)
    assert rec is not None
    raw = session_path.read_bytes()
    line = raw[rec.offset : rec.end_offset]
    assert line.endswith(b"\n")
    assert orjson.loads(line)["seq"] == rec.seq == 2
    assert (ref.session_id, ref.run_id, ref.execution_id, ref.attempt) == (
        s.id,
        run.id,
        "call_1",
        3,
    )
    assert rec.ref() == ref


def test_reserved_types_cannot_be_recorded(session_path: Path) -> None:
    """Hosts cannot forge lifecycle records such as checkpoint or run_close."""
    with Session.create(session_path) as s, s.begin_run() as run:
        for kind in ("session_start", "run_start", "run_close", "checkpoint"):
            with pytest.raises(ValueError, match="written by loopscribe"):
                run.record(Event(kind))


def test_closed_run_and_session_refuse_records(session_path: Path) -> None:
    """Recording after close is an error, and closing twice is harmless."""
    s = Session.create(session_path)
    run = s.begin_run()
    run.close()
    run.close()
    with pytest.raises(SessionClosedError):
        run.record(Event("turn_start"))
    s.close()
    s.close()
    with pytest.raises(SessionClosedError):
        s.begin_run()


def test_session_close_closes_the_open_run(session_path: Path) -> None:
    """Closing the Session writes run_close for a run left open."""
    s = Session.create(session_path)
    run = s.begin_run()
    s.close()
    assert run.closed
    assert [r.type for r in read(session_path)][-1] == "run_close"


def test_interrupted_run_stays_incomplete_after_reopen(session_path: Path) -> None:
    """A run without run_close stays that way; the next run is a new one."""
    s = Session.create(session_path)
    old = s.begin_run()
    old.record(Event("turn_start", Execution("t", "turn")))
    s._release()  # simulate a crash: no run_close, descriptor dropped
    with Session.open(session_path) as again, again.begin_run() as new:
        assert new.id != old.id
    closes = [r.run_id for r in read(session_path) if r.type == "run_close"]
    assert closes == [new.id]


def test_observers_see_each_record_after_it_is_on_disk(session_path: Path) -> None:
    """Every written Record reaches observers, in order, once its line is in the file."""
    seen: list[Record] = []

    def observer(record: Record) -> None:
        raw = session_path.read_bytes()
        assert raw[record.offset : record.end_offset].endswith(b"\n")
        seen.append(record)

    with Session.create(session_path, observers=[observer]) as s, s.begin_run() as run:
        run.record(Event("message_update", None, {"delta": "x"}))  # transient: not seen
        run.record(Event("turn_start", Execution("t", "turn")))
    assert [r.type for r in seen] == ["session_start", "run_start", "turn_start", "run_close"]
    assert [r.seq for r in seen] == [0, 1, 2, 3]


def test_a_failing_observer_is_logged_and_never_breaks_recording(
    session_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An observer that raises is logged and counted; recording goes on."""

    def broken(record: Record) -> None:
        raise RuntimeError("observer bug")

    with caplog.at_level(logging.ERROR, logger="loopscribe"):
        with Session.create(session_path, observers=[broken]) as s, s.begin_run() as run:
            assert run.record(Event("turn_start", Execution("t", "turn"))) is not None
        assert s.observer_errors == 4
    assert "observer" in caplog.text
    assert len(list(read(session_path))) == 4


def test_load_checkpoint_returns_only_the_latest_explicit_checkpoint(session_path: Path) -> None:
    """Later records never advance the checkpoint; only save_checkpoint does."""
    with Session.create(session_path) as s:
        assert s.load_checkpoint() is None
        with s.begin_run() as run:
            run.save_checkpoint({"turn": 1})
            run.save_checkpoint({"turn": 2})
            run.record(Event("turn_start", Execution("t3", "turn"), {"turn": 3}))
            run.record(ev.model_request(Execution("m", "model"), [{"role": "user"}]))
        assert s.load_checkpoint() == {"turn": 2}
    with Session.open(session_path) as s:
        assert s.load_checkpoint() == {"turn": 2}
    assert load_checkpoint(session_path) == {"turn": 2}


def test_no_implicit_snapshot_at_lifecycle_events(session_path: Path) -> None:
    """Turn and agent lifecycle records never carry a full state snapshot."""
    state = {"messages": ["CANARY-STATE"] * 3}
    ex = Execution("turn_1", "turn")
    with Session.create(session_path) as s, s.begin_run() as run:
        run.record(Event("turn_end", ex, {"turn": 1, "state": state}))
        run.record(Event("agent_end", Execution("a", "agent"), {"agent": "x", "state": state}))
    assert b"CANARY-STATE" not in session_path.read_bytes()
    assert all(r.type != "checkpoint" for r in read(session_path))
    assert load_checkpoint(session_path) is None


def test_a_detached_run_resumes_in_a_later_process_as_the_same_run(session_path: Path) -> None:
    """detach leaves the run open without run_close; resume_run continues it, with source times."""
    began = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with Session.create(session_path) as s:
        run = s.begin_run(timestamp=began)
        run.record(Event("turn_start", Execution("t1", "turn")))
        run.detach()
        assert s.run is None
    assert [r.type for r in read(session_path)][-1] == "turn_start"
    with Session.open(session_path) as again:
        with pytest.raises(RunStateError, match="not the file's last open run"):
            again.resume_run("0" * 16)
        resumed = again.resume_run(run.id)
        resumed.record(Event("turn_end", Execution("t1", "turn")))
        resumed.close(timestamp=began + timedelta(seconds=3))
        with pytest.raises(RunStateError):
            again.resume_run(run.id)  # closed now
    records = list(read(session_path))
    assert {r.run_id for r in records if r.run_id} == {run.id}
    assert [r.type for r in records].count("run_start") == 1
    assert records[1].ts == began
    assert records[-1].type == "run_close"
    assert records[-1].ts == began + timedelta(seconds=3)


def test_resume_run_leaves_the_gap_visible_in_the_file_and_the_run_span(
    session_path: Path,
) -> None:
    """resume_run writes run_resume, and the replayed run span names where it resumed."""
    from loopscribe.otel import replay
    from loopscribe.testing import captured_spans

    with Session.create(session_path) as s:
        run = s.begin_run()
        run.record(Event("turn_start", Execution("t1", "turn")))
        run.detach()
    with Session.open(session_path) as again:
        resumed = again.resume_run(run.id)
        resumed.record(Event("turn_end", Execution("t1", "turn")))
    records = list(read(session_path))
    gap = [r for r in records if r.type == "run_resume"]
    assert len(gap) == 1
    assert gap[0].run_id == run.id
    start = next(r for r in records if r.type == "run_start")
    assert gap[0].data == {
        "after_seq": gap[0].seq - 1,
        "run_start": {"seq": start.seq, "ts": format_ts(start.ts)[1]},
    }
    spans = captured_spans()
    replay(session_path, spans.processor)
    root = next(s for s in spans.spans if s.name.startswith("invoke_agent"))
    assert root.attributes is not None
    assert root.attributes["loopscribe.run.resumed_at_seq"] == (gap[0].seq,)


def test_the_same_event_object_recorded_twice_in_a_row_is_written_once(
    session_path: Path,
) -> None:
    """One fact delivered twice (stream and observer) is one record; a new fact is not skipped."""
    when = datetime(2026, 5, 1, tzinfo=UTC)
    fact = Event("note", None, {"n": 1}, when)
    unstamped = Event("heartbeat", None, {})
    with Session.create(session_path) as s, s.begin_run() as run:
        first = run.record(fact)
        assert run.record(fact) is first
        run.record(Event("note", None, {"n": 1}, when))  # equal, but another fact
        run.record(unstamped)
        run.record(unstamped)  # no source time: "now", twice
        run.record(fact)  # not in a row any more
    kinds = [r.type for r in read(session_path)][2:-1]
    assert kinds == ["note", "note", "heartbeat", "heartbeat", "note"]


class RefusingCodec(Codec):
    """A custom codec that refuses any record holding the key ``refuse``."""

    def dumps(self, value: Any, **options: Any) -> bytes:
        data = value.get("data") if isinstance(value, dict) else None
        if isinstance(data, dict) and "refuse" in data:
            raise EncodeError("this codec refuses it")
        return super().dumps(value, **options)


def test_a_codec_refusal_raises_from_record_and_is_sticky(session_path: Path) -> None:
    """Nothing of the refused record is written; later records and close raise the same error."""
    s = Session.create(session_path, RefusingCodec())
    run = s.begin_run()
    run.record(Event("note", None, {"fine": 1}))
    size = s.size
    with pytest.raises(EncodeError, match=r"seq 3 \(note\): this codec refuses it") as err:
        run.record(Event("note", None, {"refuse": 1}))
    assert s.size == size
    assert s.error is err.value
    with pytest.raises(EncodeError):
        run.record(Event("note", None, {"fine": 2}))
    with pytest.raises(EncodeError):
        s.close()
    assert [r.data for r in read(session_path) if r.type == "note"] == [{"fine": 1}]

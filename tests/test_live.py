"""Following a session file as it is written."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import orjson
import pytest

from loopscribe import CorruptRecordError, Event, Execution, FormatError, Session, read
from loopscribe.live import Bus, follow


def write_session(path: Path, count: int) -> None:
    """Record ``count`` events in one run."""
    with Session.create(path) as s, s.begin_run() as run:
        for i in range(count):
            run.record(Event("turn_start", Execution(f"t{i}", "turn"), {"i": i}))


def test_follow_yields_records_as_a_writer_appends(session_path: Path) -> None:
    """Records written by another thread arrive in order, each once."""
    s = Session.create(session_path)
    run = s.begin_run()
    done = threading.Event()

    def writer() -> None:
        for i in range(30):
            run.record(Event("turn_start", Execution(f"t{i}", "turn")))
        s.close()
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seqs = [r.seq for r in follow(session_path, stop=done, poll_interval=0.001)]
    thread.join()
    assert seqs == list(range(33))


def test_follow_never_yields_an_unfinished_line(session_path: Path) -> None:
    """A line without its newline is held back until it is complete."""
    write_session(session_path, 2)
    full = session_path.read_bytes()
    last_start = full.rstrip(b"\n").rfind(b"\n") + 1
    session_path.write_bytes(full[: last_start + 10])
    first = list(follow(session_path, idle_timeout=0.05, poll_interval=0.01))
    assert [r.seq for r in first] == [0, 1, 2, 3]
    with session_path.open("ab") as f:
        f.write(full[last_start + 10 :])
    again = list(follow(session_path, first[-1].end_offset, idle_timeout=0.05))
    assert [r.seq for r in again] == [4]
    assert again[0].data == {"synced": {"seq": 4, "offset": again[0].offset}}


@pytest.mark.parametrize("pick", ["offset", "end_offset"])
def test_follow_resumes_from_any_offset_it_returned(session_path: Path, pick: str) -> None:
    """Resuming from a returned offset yields exactly the records from there on."""
    write_session(session_path, 5)
    records = list(read(session_path))
    for i, record in enumerate(records):
        offset = getattr(record, pick)
        expected = records[i:] if pick == "offset" else records[i + 1 :]
        got = list(follow(session_path, offset, idle_timeout=0))
        assert got == expected


def test_follow_works_with_async_for(session_path: Path) -> None:
    """The same follower is an async iterator."""
    write_session(session_path, 3)

    async def collect() -> list[int]:
        return [r.seq async for r in follow(session_path, idle_timeout=0)]

    assert asyncio.run(collect()) == list(range(6))


def test_follow_reports_damage_with_its_line(session_path: Path) -> None:
    """A damaged line found while following names its line and offset."""
    write_session(session_path, 2)
    lines = session_path.read_bytes().splitlines(keepends=True)
    bad = orjson.loads(lines[3])
    bad["seq"] = 7
    session_path.write_bytes(b"".join([*lines[:3], orjson.dumps(bad) + b"\n"]))
    with pytest.raises(CorruptRecordError) as info:
        list(follow(session_path, idle_timeout=0))
    assert info.value.line == 4
    assert info.value.offset == sum(len(x) for x in lines[:3])
    assert ":4: byte" in str(info.value)


def test_follow_detects_a_shrinking_file(session_path: Path) -> None:
    """A file truncated under the follower is an error, not silence."""
    write_session(session_path, 2)
    stream = iter(follow(session_path, poll_interval=0.001, idle_timeout=1))
    assert next(stream).seq == 0
    session_path.write_bytes(b"")
    with pytest.raises(FormatError, match="shrank"):
        list(stream)


def test_bus_replays_from_an_offset_then_streams_without_duplicates(session_path: Path) -> None:
    """A subscriber gets exactly the buffered records at or after its offset, then new ones."""
    bus = Bus()
    s = Session.create(session_path, observers=[bus])
    run = s.begin_run()
    for i in range(5):
        run.record(Event("turn_start", Execution(f"t{i}", "turn")))
    records = list(read(session_path))
    cut = records[3]
    sub = bus.subscribe(s.id, from_offset=cut.offset)
    run.record(Event("turn_start", Execution("late", "turn")))
    run.close()
    s.close()
    got = []
    while (record := sub.get(timeout=0.5)) is not None:
        got.append(record.seq)
        if record.type == "run_close":
            break
    assert got == list(range(3, 9))
    assert bus.terminal(s.id) is not None
    assert bus.terminal(s.id).type == "run_close"  # type: ignore[union-attr]
    assert not bus.has_pending(s.id)
    everything = bus.subscribe(s.id)
    assert [r.seq for r in everything._replay] == list(range(9))
    bus.clear(s.id)
    assert bus.terminal(s.id) is None
    assert bus.subscribe(s.id)._replay == []


def test_slow_subscriber_drops_and_never_delays_recording(session_path: Path) -> None:
    """A subscriber that never reads loses records (counted) while record() stays fast."""
    bus = Bus(queue_size=10)
    with Session.create(session_path, observers=[bus]) as s, s.begin_run() as run:
        slow = bus.subscribe(s.id)
        started = time.perf_counter()
        for i in range(500):
            run.record(Event("turn_start", Execution(f"t{i}", "turn")))
        elapsed = time.perf_counter() - started
    assert slow.dropped == 500 + 1 - 10  # run_close included; the queue holds 10
    assert elapsed < 2.0
    slow.close()
    delivered = [r.seq for r in slow]  # what was queued before it closed
    assert delivered == list(range(12))  # 2 replayed from the buffer, then the 10 queued


def test_bus_subscription_is_async_iterable(session_path: Path) -> None:
    """An async consumer (a web socket handler) iterates the same subscription."""
    bus = Bus()
    with Session.create(session_path, observers=[bus]) as s, s.begin_run():
        pass
    sub = bus.subscribe(s.id)

    async def consume() -> list[str]:
        out = []
        async for record in sub:
            out.append(record.type)
            if record.type == "run_close":
                sub.close()
        return out

    assert asyncio.run(consume()) == ["session_start", "run_start", "run_close"]

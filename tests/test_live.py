"""Following a session file as it is written."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import (
    CorruptRecordError,
    Event,
    Execution,
    FormatError,
    Record,
    Session,
    Transient,
    read,
)
from loopscribe import events as ev
from loopscribe.live import Bus, Subscription, follow


def drain(sub: Subscription, timeout: float = 0.5) -> list[Record | Transient]:
    """Everything the subscription delivers until it is quiet for ``timeout`` seconds."""
    out: list[Record | Transient] = []
    while (item := sub.get(timeout)) is not None:
        out.append(item)
    return out


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


def test_a_file_renamed_over_the_path_as_the_follower_joins_is_noticed(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replaced between catching up and joining the shared reader: an error, not a stranger.

    The other session has the same length, so following it from the old offset
    would print nothing and never end.
    """
    from loopscribe import live

    write_session(session_path, 2)
    other = session_path.with_name("other.jsonl")
    write_session(other, 2)
    join = live._join

    def join_after_a_rename(*args: object, **kwargs: object) -> object:
        if other.exists():
            other.rename(session_path)
        return join(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(live, "_join", join_after_a_rename)
    with pytest.raises(FormatError, match="replaced"):
        list(follow(session_path, idle_timeout=5))


def test_a_replacement_the_shared_reader_finds_before_anyone_joins_still_reaches_them(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared reader's first read fails (the file was replaced) before the follower that
    started it has joined: the follower says so instead of waiting forever (``tail -f``)."""
    from loopscribe import live

    write_session(session_path, 2)
    other = session_path.with_name("other.jsonl")
    write_session(other, 2)
    start_reader = live._SharedReader.__init__

    def reader_that_reads_at_once(self: Any, *args: Any, **kwargs: Any) -> None:
        if other.exists():
            other.rename(session_path)
        start_reader(self, *args, **kwargs)
        self.poll()  # its thread's first wake-up, before the follower's channel is added

    monkeypatch.setattr(live._SharedReader, "__init__", reader_that_reads_at_once)
    raised: list[BaseException] = []

    def tail() -> None:
        try:
            list(follow(session_path))  # no idle timeout: as `loopscribe tail -f`
        except FormatError as exc:
            raised.append(exc)

    worker = threading.Thread(target=tail, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the follower waits on a reader that closed before it joined"
    assert len(raised) == 1
    assert "replaced" in str(raised[0])


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
        assert isinstance(record, Record)
        got.append(record.seq)
        if record.type == "run_close":
            break
    assert got == list(range(3, 9))
    assert bus.terminal(s.id) is not None
    assert bus.terminal(s.id).type == "run_close"  # type: ignore[union-attr]
    assert not bus.has_pending(s.id)
    everything = bus.subscribe(s.id)
    assert [r.seq for r in everything._replay if isinstance(r, Record)] == list(range(9))
    bus.clear(s.id)
    assert bus.terminal(s.id) is None
    assert not bus.subscribe(s.id)._replay


def test_slow_subscriber_drops_and_never_delays_recording(session_path: Path) -> None:
    """A subscriber that never reads loses records (counted) while record() never waits for it."""
    bus = Bus(queue_size=10)
    recorded = threading.Event()
    s = Session.create(session_path, observers=[bus])
    run = s.begin_run()
    slow = bus.subscribe(s.id)  # nobody reads it until every record() has returned

    def record_all() -> None:
        with run:
            for i in range(500):
                run.record(Event("turn_start", Execution(f"t{i}", "turn")))
        recorded.set()

    writer = threading.Thread(target=record_all, daemon=True)
    writer.start()
    try:
        # A writer that waited for room in the full queue would never get it, as nothing
        # reads; one that waited a little per record (60 ms or more) misses this too.
        assert recorded.wait(30), "record() waited for a subscriber that does not read"
    finally:
        if not recorded.is_set():  # let a waiting writer finish, so the session can close
            threading.Thread(target=lambda: [None for _ in slow], daemon=True).start()
        writer.join(30)
        s.close()
    assert slow.dropped == 500 + 1 - 10  # run_close included; the queue holds 10
    slow.close()
    delivered = [r.seq for r in slow if isinstance(r, Record)]  # what was queued before it closed
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


def test_transient_events_reach_bus_subscribers_but_never_the_file(session_path: Path) -> None:
    """Token deltas and tool progress recorded through a run reach the bus, in order, unwritten."""
    from loopscribe import events as ev

    bus = Bus()
    with Session.create(session_path, observers=[bus]) as s, s.begin_run() as run:
        everything = bus.subscribe(s.id)
        records_only = bus.subscribe(s.id, records_only=True)
        model = Execution("m1", "model")
        tool = Execution("call_1", "tool")
        run.record(ev.message_update(model, None, delta="Hel"))
        run.record(ev.model_stream(model, "lo"))
        run.record(ev.tool_exec_start(tool, "search", {"q": "x"}))
        run.record(ev.tool_exec_update(tool, {"progress": 0.5}))
        run.record(ev.tool_exec_end(tool, "search", "done"))
    on_disk = [r.type for r in read(session_path)]
    assert not {"message_update", "model_stream", "tool_exec_update"} & set(on_disk)
    got = [(type(item).__name__, item.type) for item in drain(everything)]
    assert got == [
        ("Record", "session_start"),
        ("Record", "run_start"),
        ("Transient", "message_update"),
        ("Transient", "model_stream"),
        ("Record", "tool_exec_start"),
        ("Transient", "tool_exec_update"),
        ("Record", "tool_exec_end"),
        ("Record", "run_close"),
    ]
    assert [r.type for r in drain(records_only)] == on_disk
    # A late subscriber replays the deltas in their place among the records (best-effort).
    late = bus.subscribe(s.id)
    replayed = drain(late, 0)
    assert [i.type for i in replayed] == [t for _kind, t in got]
    delta = next(i for i in replayed if isinstance(i, Transient))
    assert delta.data["delta"] == "Hel"
    assert delta.execution == model
    late_records = bus.subscribe(s.id, from_offset=replayed[4].offset, records_only=True)
    assert [i.type for i in drain(late_records, 0)] == on_disk[2:]


def test_plain_event_on_the_bus_is_a_transient_or_a_clear_type_error() -> None:
    """A plain Event with a session ID is delivered as transient; without one, a TypeError."""
    bus = Bus()
    sid = "a" * 32
    sub = bus.subscribe(sid)
    bus.publish(Event("message_update", Execution("m", "model"), {"delta": "x"}), session_id=sid)
    item = sub.get(0.5)
    assert isinstance(item, Transient)
    assert (item.type, item.session_id, item.data) == ("message_update", sid, {"delta": "x"})
    with pytest.raises(TypeError, match="session_id"):
        bus.publish(Event("message_update"))
    with pytest.raises(TypeError, match="Record, a Transient or an Event"):
        bus.publish({"type": "message_update"})  # type: ignore[arg-type]


def test_async_subscription_wakes_on_transients_from_another_thread(session_path: Path) -> None:
    """An async consumer gets deltas published by a recording thread without polling."""
    from loopscribe import events as ev

    bus = Bus()
    s = Session.create(session_path, observers=[bus])
    run = s.begin_run()
    sub = bus.subscribe(s.id, from_offset=s.size)

    def writer() -> None:
        for i in range(20):
            run.record(ev.message_update(Execution("m", "model"), None, delta=str(i)))
        run.close()
        s.close()

    async def consume() -> list[str]:
        thread = threading.Thread(target=writer)
        thread.start()
        out = []
        async for item in sub:
            out.append(item.type if item.type != "message_update" else item.data["delta"])
            if item.type == "run_close":
                sub.close()
        thread.join()
        return out

    assert asyncio.run(asyncio.wait_for(consume(), 10)) == [*map(str, range(20)), "run_close"]


def test_many_followers_share_one_reader_and_each_gets_every_record(session_path: Path) -> None:
    """Twenty followers of one file: one reader thread, each follower gets all records in order."""
    from loopscribe.live import _readers

    write_session(session_path, 3)
    s = Session.open(session_path)
    run = s.begin_run()
    done = threading.Event()
    results: list[list[int]] = [[] for _ in range(20)]

    def follower(i: int) -> None:
        for record in follow(session_path, stop=done, poll_interval=0.005):
            results[i].append(record.seq)

    threads = [threading.Thread(target=follower, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()

    def readers() -> list[Any]:
        return [r for r in list(_readers.values()) if r.path == session_path.absolute()]

    # A follower reads what is there on its own before it joins: wait for every join.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (
        all(len(r) >= 6 for r in results) and sum(len(r.channels) for r in readers()) == 20
    ):
        time.sleep(0.01)
    assert len(readers()) == 1
    assert len(readers()[0].channels) == 20
    for i in range(50):
        run.record(Event("turn_start", Execution(f"n{i}", "turn")))
    s.close()
    done.set()
    for t in threads:
        t.join(10)
    total = 6 + 1 + 50 + 1  # the first file, run_start, the turns, run_close
    assert all(r == list(range(total)) for r in results)
    deadline = time.monotonic() + 10  # the last follower to leave retires the reader
    while readers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not readers()


def test_a_follower_joining_late_resumes_exactly_where_it_asked(session_path: Path) -> None:
    """Followers starting at different offsets while the file grows miss and repeat nothing."""
    write_session(session_path, 2)
    s = Session.open(session_path)
    run = s.begin_run()
    done = threading.Event()
    first: list[int] = []
    early = threading.Thread(
        target=lambda: first.extend(r.seq for r in follow(session_path, stop=done))
    )
    early.start()
    for i in range(30):
        run.record(Event("turn_start", Execution(f"n{i}", "turn")))
    middle = list(read(session_path))[20]
    second: list[int] = []
    late = threading.Thread(
        target=lambda: second.extend(r.seq for r in follow(session_path, middle.offset, stop=done))
    )
    late.start()
    for i in range(30):
        run.record(Event("turn_start", Execution(f"m{i}", "turn")))
    s.close()
    done.set()
    early.join(10)
    late.join(10)
    last = list(read(session_path))[-1].seq
    assert first == list(range(last + 1))
    assert second == list(range(20, last + 1))


def test_a_follower_wakes_on_change_well_before_its_poll_interval(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With inotify, the change itself wakes the shared reader: no poll timer is involved."""
    import loopscribe.live as live_module

    if live_module.watch_mode() != "inotify":
        pytest.skip("inotify is only available on Linux")
    # No timer may wake the reader while the test runs: neither the poll interval nor the
    # safety look inotify takes every second. Only the file's change event can deliver.
    monkeypatch.setattr(live_module._Waker, "_SAFETY_SECONDS", 3600.0)
    write_session(session_path, 1)
    s = Session.open(session_path)
    run = s.begin_run()
    got = threading.Event()

    def follower() -> None:
        for record in follow(session_path, poll_interval=3600.0):
            if record.type == "turn_end":
                got.set()
                return  # leaves the shared reader

    def joined() -> bool:
        with live_module._readers_lock:
            readers = live_module._readers.values()
            return any(r.path == session_path.absolute() and r.channels for r in readers)

    thread = threading.Thread(target=follower, daemon=True)
    thread.start()
    # Wait until the follower caught up and waits in the shared reader; a record written
    # before that would be read on the way in, proving nothing about wake-ups.
    deadline = time.monotonic() + 10
    while not joined() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert joined(), "the follower never joined the shared reader"
    run.record(Event("turn_end", Execution("x", "turn")))
    assert got.wait(30), "the change did not wake the shared reader"
    thread.join(10)
    s.close()  # its last record wakes the retired reader, which then ends


def test_polling_fallback_delivers_in_a_separate_process(tmp_path: Path) -> None:
    """With inotify disabled (as off Linux) the shared reader polls and still delivers."""
    import subprocess
    import sys

    path = tmp_path / "s.jsonl"
    write_session(path, 2)
    code = (
        "import sys, threading\n"
        "from loopscribe.live import follow, watch_mode\n"
        "assert watch_mode() == 'poll', watch_mode()\n"
        "from loopscribe import Session, Event, Execution\n"
        "stop = threading.Event()\n"
        "s = Session.open(sys.argv[1]); run = s.begin_run()\n"
        "def w():\n"
        "    for i in range(5): run.record(Event('turn_start', Execution(f'x{i}', 'turn')))\n"
        "    s.close(); stop.set()\n"
        "seqs = []\n"
        "it = follow(sys.argv[1], stop=stop, poll_interval=0.01)\n"
        "t = threading.Thread(target=w)\n"
        "for r in it:\n"
        "    seqs.append(r.seq)\n"
        "    if r.seq == 5 and not t.is_alive() and not stop.is_set(): t.start()\n"
        "print(seqs)\n"
    )
    env = {**__import__("os").environ, "LOOPSCRIBE_FOLLOW_POLL": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(list(range(12)))  # 5 before, run_start, 5 turns, run_close


def test_executor_stream_chunks_reach_the_bus_through_the_recorder(session_path: Path) -> None:
    """A standalone call's model_stream chunks, published via Recorder, reach bus subscribers."""
    from loopscribe import LLMRequest, ModelExecution, ModelExecutor, Recorder, UserMessage

    def model(request: LLMRequest) -> list[str]:
        return ["Hel", "lo"]

    bus = Bus()
    with Session.create(session_path, observers=[bus]) as s, s.begin_run() as run:
        sub = bus.subscribe(s.id, from_offset=s.size)
        call = ModelExecution(Execution("c", "model"), LLMRequest([UserMessage("hi")]))
        ModelExecutor(on_event=Recorder(run)).call(model, call)
    chunks = [i.data["chunk"] for i in drain(sub) if isinstance(i, Transient)]
    assert chunks == ["Hel", "lo"]
    assert "model_stream" not in {r.type for r in read(session_path)}


# -- the process-wide bus and the end of a stream ---------------------------------------


def test_global_bus_is_one_bus_a_session_joins_with_one_argument(tmp_path: Path) -> None:
    """global_bus() is the same Bus everywhere; bus=True (create or open) publishes into it."""
    from loopscribe.live import global_bus

    assert global_bus() is global_bus()
    with Session.create(tmp_path / "a.jsonl", bus=True) as s, s.begin_run() as run:
        run.record(Event("turn_start", Execution("t1", "turn")))
        sub = global_bus().subscribe(s.id, records_only=True)
        run.record(Event("turn_end", Execution("t1", "turn")))
    assert [r.type for r in drain(sub)] == [
        "session_start",
        "run_start",
        "turn_start",
        "turn_end",
        "run_close",
    ]
    with Session.open(tmp_path / "a.jsonl", bus=True) as s, s.begin_run():
        assert global_bus().has_pending(s.id)
    assert global_bus().terminal(s.id).type == "run_close"  # type: ignore[union-attr]
    global_bus().clear(s.id)


def test_bus_argument_takes_a_bus_of_ones_own_and_refuses_anything_else(tmp_path: Path) -> None:
    """bus=<Bus> joins that bus (not the global one); any other value is a TypeError."""
    from loopscribe.live import global_bus

    own = Bus()
    with Session.create(tmp_path / "a.jsonl", bus=own) as s:
        pass
    assert [r.type for r in own.subscribe(s.id)._replay] == ["session_start"]
    assert not global_bus().subscribe(s.id)._replay
    with pytest.raises(TypeError, match="global_bus"):
        Session.create(tmp_path / "b.jsonl", bus="yes")  # type: ignore[arg-type]
    assert not (tmp_path / "b.jsonl").exists()


def record_nested_agent(path: Path, bus: Bus, seen: list[tuple[str, bool, str | None]]) -> str:
    """A top-level agent whose tool runs a sub-agent; note the bus's state after each record."""

    def probe(record: Record) -> None:
        # An observer after the bus: what a client joining right now would be told.
        terminal = bus.terminal(record.session_id)
        ended = None if terminal is None else terminal.type
        seen.append((record.type, bus.has_pending(record.session_id), ended))

    top = Execution("agent_1", "agent")
    turn = Execution("turn_1", "turn", parent_id="agent_1")
    call = Execution("call_1", "tool", parent_id="turn_1")
    sub = Execution("agent_2", "agent", parent_id="call_1")
    with Session.create(path, observers=[bus, probe]) as s, s.begin_run() as run:
        for event in (
            ev.agent_start(top, "planner"),
            ev.turn_start(turn, 1),
            ev.tool_exec_start(call, "research"),
            ev.agent_start(sub, "researcher"),
            ev.agent_end(sub, "researcher", stop_reason="final_output"),
            ev.tool_exec_end(call, "research", "found it"),
            ev.turn_end(turn, 1),
            ev.agent_end(top, "planner", stop_reason="final_output"),
        ):
            run.record(event)
        run.save_checkpoint({"turns": 1})
    return s.id


def test_a_nested_agents_end_does_not_end_the_stream(session_path: Path) -> None:
    """Only the top-level agent_end and run_close end the stream; a sub-agent's end does not."""
    bus = Bus()
    seen: list[tuple[str, bool, str | None]] = []
    sid = record_nested_agent(session_path, bus, seen)
    assert seen == [
        ("session_start", False, None),
        ("run_start", True, None),
        ("agent_start", True, None),
        ("turn_start", True, None),
        ("tool_exec_start", True, None),
        ("agent_start", True, None),
        ("agent_end", True, None),  # the sub-agent: the run goes on
        ("tool_exec_end", True, None),
        ("turn_end", True, None),
        ("agent_end", False, "agent_end"),  # the top-level agent: the stream ended
        ("checkpoint", False, "agent_end"),  # a checkpoint starts nothing
        ("run_close", False, "run_close"),
    ]
    # A client joining after the sub-agent ended gets the rest of the stream, live.
    assert bus.terminal(sid) is not None
    assert bus.terminal(sid).execution is None  # type: ignore[union-attr]


def test_a_handoff_and_session_facts_do_not_end_or_start_a_stream(session_path: Path) -> None:
    """A top-level agent that hands off goes on in its target; a title change is no stream."""
    bus = Bus()
    first, second = Execution("agent_1", "agent"), Execution("agent_2", "agent")
    with Session.create(session_path, observers=[bus]) as s:
        with s.begin_run() as run:
            run.record(ev.agent_start(first, "triage"))
            run.record(ev.agent_end(first, "triage", stop_reason="handoff"))
            assert bus.has_pending(s.id)
            assert bus.terminal(s.id) is None
            run.record(ev.agent_start(second, "billing"))
            run.record(ev.agent_end(second, "billing", error=RuntimeError("card declined")))
            assert not bus.has_pending(s.id)
            assert bus.terminal(s.id).data["agent"] == "billing"  # type: ignore[union-attr]
        s.annotate("session_update", {"title": "Billing"})
        assert not bus.has_pending(s.id)
        with s.begin_run():
            assert bus.has_pending(s.id)
            assert bus.terminal(s.id) is None  # the last end belongs to the stream before
    assert not bus.has_pending(s.id)


def test_is_terminal_decides_by_type_nesting_and_handoff() -> None:
    """is_terminal: run_close, and agent_end of a top-level agent that did not hand off."""
    from loopscribe.live import is_terminal

    def rec(kind: str, execution: Execution | None, data: dict[str, Any]) -> Record:
        return Record("s" * 32, 1, kind, datetime.now(UTC), "r", execution, data, 0, 1)

    top, nested = Execution("a1", "agent"), Execution("a2", "agent", parent_id="call_1")
    assert is_terminal(rec("run_close", None, {}))
    assert is_terminal(rec("agent_end", top, {"stop_reason": "final_output"}))
    assert is_terminal(rec("agent_end", top, {"stop_reason": "interrupted"}))
    assert not is_terminal(rec("agent_end", top, {"stop_reason": "handoff"}))
    assert not is_terminal(rec("agent_end", nested, {}))
    assert not is_terminal(rec("model_exec_end", Execution("m", "model"), {}))


def test_published_records_decide_by_type_not_by_how_they_were_built() -> None:
    """Records handed to publish() without a run id still start and end streams by their type."""
    bus, sid = Bus(), "5" * 32

    def publish(seq: int, kind: str, execution: Execution | None) -> None:
        bus.publish(Record(sid, seq, kind, datetime.now(UTC), None, execution, {}, seq, 1))

    publish(0, "session_start", None)
    assert not bus.has_pending(sid)
    publish(1, "agent_start", Execution("a1", "agent"))
    publish(2, "agent_end", Execution("a2", "agent", parent_id="call_1"))
    assert bus.has_pending(sid)
    assert bus.terminal(sid) is None
    publish(3, "agent_end", Execution("a1", "agent"))
    publish(4, "todos", None)
    assert not bus.has_pending(sid)
    assert bus.terminal(sid).seq == 3  # type: ignore[union-attr]


def test_a_bounded_bus_forgets_only_ended_unwatched_sessions(tmp_path: Path) -> None:
    """max_sessions: the oldest ended session nobody watches goes; streaming or watched stay."""
    bus = Bus(max_sessions=2)
    with Session.create(tmp_path / "streaming.jsonl", observers=[bus]) as streaming:
        streaming_run = streaming.begin_run()
        with Session.create(tmp_path / "watched.jsonl", observers=[bus]) as watched:
            pass
        watcher = bus.subscribe(watched.id)
        with Session.create(tmp_path / "old.jsonl", observers=[bus]) as old:
            pass
        with Session.create(tmp_path / "new.jsonl", observers=[bus]) as new:
            pass
        # Over the limit: only "old" had ended and had no subscriber.
        assert not bus.subscribe(old.id)._replay
        assert bus.subscribe(watched.id, records_only=True)._replay
        assert bus.subscribe(new.id)._replay
        assert bus.has_pending(streaming.id)
        streaming_run.close()
    watcher.close()
    with pytest.raises(ValueError, match="max_sessions"):
        Bus(max_sessions=0)

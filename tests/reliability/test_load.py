"""Concurrent load: threads sharing one run through ModelExecutor, many sessions at once."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopscribe import (
    Event,
    Execution,
    LLMRequest,
    ModelExecution,
    ModelExecutor,
    Recorder,
    Session,
    StreamEnd,
    TextDelta,
    Usage,
    UserMessage,
    read,
)

THREADS = 8
CALLS_PER_THREAD = 200
SESSIONS = 100
EVENTS_PER_SESSION = 200
REQUEST = LLMRequest([UserMessage("hello")])


class Scripted:
    """A model that streams a short answer, yielding the GIL between chunks."""

    name = "m-load"

    def stream(self, request: LLMRequest) -> Iterator[Any]:
        for chunk in ("Hel", TextDelta("lo"), StreamEnd("stop", Usage(3, 2))):
            time.sleep(0)  # let other threads interleave their records
            yield chunk


def run_threads(count: int, target: Any) -> list[BaseException]:
    """Start ``count`` threads on ``target(index, barrier)`` together; return what they raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            target(index, barrier)
        except BaseException as exc:  # reported to the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return errors


def test_threads_calling_models_into_one_run_lose_nothing_and_keep_each_call_in_order(
    session_path: Path,
) -> None:
    """Eight threads of calls into one run: nothing lost, seq contiguous, each call in order."""
    with Session.create(session_path) as session, session.begin_run() as run:
        recorder = Recorder(run)
        executor = ModelExecutor(on_event=recorder)
        model = Scripted()

        def calls(index: int, barrier: threading.Barrier) -> None:
            barrier.wait()
            for k in range(CALLS_PER_THREAD):
                ex = Execution(f"t{index}-c{k}", "model")
                result = executor.call(model, ModelExecution(ex, REQUEST))
                assert result.ok
                assert result.message is not None
                assert result.message.text == "Hello"

        assert run_threads(THREADS, calls) == []
        assert recorder.failures == 0
    records = list(read(session_path))
    assert [r.seq for r in records] == list(range(len(records)))
    by_call: dict[str, list[str]] = defaultdict(list)
    for record in records:
        if record.execution is not None:
            by_call[record.execution.id].append(record.type)
    expected = {f"t{i}-c{k}" for i in range(THREADS) for k in range(CALLS_PER_THREAD)}
    assert set(by_call) == expected
    for call_id, types in by_call.items():
        assert types == ["model_exec_start", "model_request", "model_exec_end"], call_id
    assert len(records) == 3 + 3 * len(expected)  # session_start, run_start, run_close
    owners = [r.execution.id.split("-")[0] for r in records if r.execution is not None]
    assert any(a != b for a, b in itertools.pairwise(owners)), "calls never interleaved"


def test_a_hundred_sessions_written_concurrently_lose_nothing(tmp_path: Path) -> None:
    """A hundred sessions recorded at once from as many threads each hold every record, in order."""
    paths = [tmp_path / f"s{i:03d}.jsonl" for i in range(SESSIONS)]

    def write(index: int, barrier: threading.Barrier) -> None:
        with Session.create(paths[index]) as session:
            barrier.wait()
            with session.begin_run() as run:
                for i in range(EVENTS_PER_SESSION):
                    ex = Execution(f"c{i}", "tool")
                    run.record(Event("tool_exec_start", ex, {"session": index, "i": i}))

    assert run_threads(SESSIONS, write) == []
    ids = set()
    for index, path in enumerate(paths):
        records = list(read(path))
        assert [r.seq for r in records] == list(range(EVENTS_PER_SESSION + 3))
        assert [r.type for r in records[:2]] == ["session_start", "run_start"]
        assert records[-1].type == "run_close"
        events = records[2:-1]
        assert [r.data for r in events] == [
            {"session": index, "i": i} for i in range(EVENTS_PER_SESSION)
        ]
        ids.add(records[0].session_id)
    assert len(ids) == SESSIONS

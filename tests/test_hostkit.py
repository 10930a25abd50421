"""The ways-in toolkit: the policies every host path shares, tested once for all of them.

The generic behaviour of a way in — a failing recorder never breaks the
host's agent, failures are logged once on one logger and all counted —
is tested here for every adapter with its real framework and a scripted
model, instead of once per adapter.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import loopscribe
from loopscribe import Execution, Run, Session
from loopscribe import events as ev
from loopscribe._hostkit import LOGGER, Committed, Guard, OpenExecutions, run_ids, terminal

# -- Guard: the never-raise policy -------------------------------------------------------


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(LOGGER) and r.levelno >= logging.ERROR]


def test_a_guard_counts_every_failure_and_logs_the_first_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = Guard("test host")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for n in range(5):
            with guard.contained(f"step {n}"):
                raise ValueError(f"broken {n}")
    assert guard.errors == 5
    (first,) = _errors(caplog)
    assert first.name == LOGGER
    assert first.exc_info is not None
    assert str(first.exc_info[1]) == "broken 0"
    assert "test host" in first.getMessage()
    assert "step 0" in first.getMessage()
    later = [r for r in caplog.records if r.levelno == logging.DEBUG and r.name == LOGGER]
    assert [str(r.exc_info[1]) for r in later if r.exc_info] == [
        f"broken {n}" for n in (1, 2, 3, 4)
    ]


def test_a_guard_lets_base_exceptions_through() -> None:
    """Cancellation and interrupts are the host's: a guard contains ``Exception`` only."""
    guard = Guard("test host")
    with pytest.raises(asyncio.CancelledError), guard.contained("a hook"):
        raise asyncio.CancelledError
    with pytest.raises(KeyboardInterrupt), guard.contained("a hook"):
        raise KeyboardInterrupt
    assert guard.errors == 0


def test_a_guard_records_into_a_closed_run_without_raising(tmp_path: Path) -> None:
    with Session.create(tmp_path / "s.jsonl") as session:
        run = session.begin_run()
        ex = Execution("agent_1", "agent")
        guard = Guard("test host")
        assert guard.record(run, ev.agent_start(ex, "a"))
        run.close()
        assert not guard.record(run, ev.agent_end(ex, "a"))
        assert guard.call("a step", lambda: 1 / 0) is None
        assert guard.call("a step", lambda x: x + 1, 1) == 2
    assert guard.errors == 2


def test_a_guard_counts_failures_from_many_threads() -> None:
    guard = Guard("test host")

    def fail() -> None:
        for _ in range(200):
            with guard.contained("a thread"):
                raise RuntimeError("x")

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert guard.errors == 1600


# -- ids, attempts, open executions, commits ----------------------------------------------


def test_run_ids_are_shared_by_every_host_of_one_run_and_a_reused_call_id_is_an_attempt(
    tmp_path: Path,
) -> None:
    with Session.create(tmp_path / "s.jsonl") as session:
        with session.begin_run() as run:
            first, second = run_ids(run), run_ids(run)
            assert first is second
            assert [first.number("agent"), second.number("agent"), first.number("turn")] == [
                1,
                2,
                1,
            ]
            assert first.call("call_1", "tool", "turn_1") == Execution(
                "call_1", "tool", 1, "turn_1"
            )
            assert second.call("call_1", "tool", "turn_2") == Execution(
                "call_1", "tool", 2, "turn_2"
            )
            first.note(Execution("call_9", "tool", 4))
            first.note(Execution("call_9", "tool", 2))  # an older attempt never goes back
            assert first.attempt("call_9") == 5
        with session.begin_run() as other:
            assert run_ids(other).number("agent") == 1  # ids are run-local


def test_open_executions_drain_innermost_first() -> None:
    table: OpenExecutions[str, Execution] = OpenExecutions()
    agent = table.open("a", Execution("agent_1", "agent"))
    turn = table.open("t", Execution("turn_1", "turn", parent_id="agent_1"))
    table.open("m", Execution("model_1", "model", parent_id="turn_1"))
    assert table.close("m") is not None
    assert table.close("m") is None
    tool = table.open("x", Execution("call_1", "tool", parent_id="turn_1"))
    assert table.get(None) is None
    assert table.get("t") == turn
    assert "x" in table
    assert len(table) == 3
    assert list(table) == ["a", "t", "x"]
    assert table.drain() == [("x", tool), ("t", turn), ("a", agent)]
    assert len(table) == 0
    assert table.drain() == []


def test_open_executions_trim_lets_the_oldest_go_beyond_a_bound() -> None:
    """Ends that never come (a span never ended) keep the table bounded, oldest out first."""
    table: OpenExecutions[int, str] = OpenExecutions()
    for n in range(5):
        table.open(n, f"v{n}")
    table.open(1, "v1 again")  # opened again: the newest now
    assert table.trim(3) == [(0, "v0"), (2, "v2")]
    assert list(table) == [3, 4, 1]
    assert table.trim(3) == []
    assert table.trim(-1) == [(3, "v3"), (4, "v4"), (1, "v1 again")]
    assert len(table) == 0


def test_committed_says_first_once() -> None:
    committed: Committed[str] = Committed()
    assert [committed.first(k) for k in ("a", "b", "a", "b", "c")] == [1, 1, 0, 0, 1]
    assert "a" in committed
    committed.clear()
    assert committed.first("a")


def test_closing_what_is_left_open_writes_each_kinds_terminal_record(tmp_path: Path) -> None:
    """What a failed host run left open ends innermost first, each with its kind's record."""
    path = tmp_path / "s.jsonl"
    table: OpenExecutions[str, tuple[Execution, str]] = OpenExecutions()
    error = RuntimeError("the host run failed")
    with Session.create(path) as session, session.begin_run() as run:
        opened = [
            (Execution("agent_1", "agent"), "weather", ev.agent_start),
            (Execution("turn_1", "turn", parent_id="agent_1"), "", None),
            (Execution("guardrail_1", "guardrail", parent_id="agent_1"), "no pii", None),
            (Execution("model_1", "model", parent_id="turn_1"), "", None),
            (Execution("call_1", "tool", parent_id="turn_1"), "get_weather", None),
        ]
        for execution, name, _ in opened:
            table.open(execution.id, (execution, name))
        for _key, (execution, name) in table.drain():
            run.record(terminal(execution, name, error=error, stop_reason="error", turn=1))
    records = [r for r in loopscribe.read(path) if r.execution is not None]
    assert [(r.type, r.execution.id if r.execution else None) for r in records] == [
        ("tool_exec_end", "call_1"),
        ("model_exec_end", "model_1"),
        ("guardrail_end", "guardrail_1"),
        ("turn_end", "turn_1"),
        ("agent_end", "agent_1"),
    ]
    for record in records:
        assert record.data["error"]["type"] == "RuntimeError"
    assert records[0].data["is_error"] is True
    assert records[0].data["disposition"] == "error"
    assert records[3].data["turn"] == 1


def test_the_executor_recorder_follows_the_same_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Session.create(tmp_path / "s.jsonl") as session:
        run = session.begin_run()
        run.close()
        recorder = loopscribe.Recorder(run)
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            for n in range(3):
                recorder(ev.agent_start(Execution(f"agent_{n}", "agent"), "a"))
    assert recorder.failures == 3
    assert len(_errors(caplog)) == 1


# -- every adapter: a failing recorder never breaks the agent ------------------------------


def _langchain(run: Run) -> tuple[object, Callable[[], int]]:
    from loopscribe.adapters.langchain import LoopscribeCallbackHandler
    from tests.adapters.test_langchain import converse

    handler = LoopscribeCallbackHandler(run)
    final = converse(handler)
    return final[-1].content, lambda: handler.errors


def _pydantic_ai(run: Run) -> tuple[object, Callable[[], int]]:
    from loopscribe.adapters.pydantic_ai import LoopscribeCapability
    from tests.adapters.test_pydantic_ai import CONVERSATION, Script, weather_agent

    recorder = LoopscribeCapability(run)
    result = asyncio.run(
        weather_agent(Script(CONVERSATION)).run("Weather?", capabilities=[recorder])
    )
    return result.output, lambda: recorder.errors


def _agents_hooks(run: Run) -> tuple[object, Callable[[], int]]:
    from loopscribe.adapters.openai_agents import LoopscribeHooks
    from tests.adapters.test_openai_agents import OFFLINE, weather_agents

    hooks = LoopscribeHooks(run)
    result = asyncio.run(hooks.run(weather_agents(), "hello", run_config=OFFLINE))
    return result.final_output, lambda: hooks.errors


HOSTS: dict[str, tuple[Callable[[Run], tuple[object, Callable[[], int]]], str, int]] = {
    # host: (drive it, what the agent answers, failures at least)
    "langchain": (_langchain, "No forecast today, sorry.", 10),
    "pydantic_ai": (_pydantic_ai, "It is sunny. canary-output-33f0", 1),
    "openai_agents": (_agents_hooks, "It is 21C and sunny; the rocket did not launch.", 10),
}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_a_failing_recorder_never_breaks_the_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, host: str
) -> None:
    """Recording into a closed run fails in every callback; the agent answers all the same.

    Every failure is counted; the first is logged once, with its traceback,
    at ERROR on the ``loopscribe`` logger; nothing but the run's own records
    reaches the file.
    """
    drive, answer, at_least = HOSTS[host]
    path = tmp_path / "closed.jsonl"
    with Session.create(path) as session:
        run = session.begin_run()
        run.close()
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            output, errors = drive(run)
    assert output == answer
    assert errors() >= at_least
    (first,) = _errors(caplog)
    assert first.name == LOGGER
    assert first.exc_info is not None
    assert "recording failed" in first.getMessage()
    assert [r.type for r in loopscribe.read(path)] == ["session_start", "run_start", "run_close"]


def test_a_turn_named_by_its_number_ends_with_that_number() -> None:
    turn = Execution("turn_3", "turn", parent_id="agent_1")
    assert terminal(turn, "3").data["turn"] == 3
    assert terminal(turn, "", turn=2).data["turn"] == 2
    assert terminal(turn, "").data["turn"] == 0


# -- the instrumentors and the intake: a failing recording never reaches the host ----------


def _only_the_runs_own_lines(line: bytes) -> bytes:
    """A redactor that breaks on every record but the session's and the run's own."""
    if any(f'"type":"{kind}"'.encode() in line for kind in _OWN):
        return line
    raise RuntimeError("redactor broke")


_OWN = ("session_start", "run_start", "run_close")


def test_a_failing_recording_never_breaks_an_instrumented_sdk_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every record of an instrumented OpenAI call fails; the caller gets its answer.

    Every failure is counted on the instrumentations' one guard; the first
    is logged once, with its traceback, at ERROR on the ``loopscribe``
    logger; nothing but the run's own records reaches the file.
    """
    from loopscribe import instrument
    from loopscribe.instrument._body import GUARD
    from tests.instrument.conftest import Server
    from tests.instrument.test_openai import CHAT, ask, client

    monkeypatch.setattr(GUARD, "errors", 0)  # the process's guard: as if none failed yet
    server = Server()
    server.reply(429, json={"error": {"message": "later"}}, headers={"retry-after-ms": "1"})
    server.reply(200, json=CHAT)
    path = tmp_path / "s.jsonl"
    handle = instrument.openai()
    try:
        with (
            caplog.at_level(logging.DEBUG, logger=LOGGER),
            Session.create(path, redact=_only_the_runs_own_lines) as session,
            session.begin_run(),
        ):
            answer = ask(client(server))
    finally:
        handle.uninstrument()
    assert answer.choices[0].message.content == "Let me look."
    assert len(server.bodies) == 2
    # Two attempts, each: start, request, end; the retry between; the user's messages.
    assert GUARD.errors >= 7
    (first,) = _errors(caplog)
    assert first.name == LOGGER
    assert first.exc_info is not None
    assert "recording failed" in first.getMessage()
    assert [r.type for r in loopscribe.read(path)] == list(_OWN)


def test_a_failing_recording_never_breaks_the_hosts_spans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The intake's records all fail; the host's span ends and goes on without its bodies."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopscribe.intake import OffloadingProcessor
    from tests.intake.test_processor import MESSAGES, REPLY

    exporter = InMemorySpanExporter()
    processor = OffloadingProcessor(
        SimpleSpanProcessor(exporter), tmp_path / "sessions", redact=_only_the_runs_own_lines
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": MESSAGES,
        "gen_ai.output.messages": REPLY,
    }
    try:
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            for _ in range(3):
                with provider.get_tracer("host").start_as_current_span(
                    "chat m", attributes=attributes
                ):
                    pass
    finally:
        provider.shutdown()
    spans = exporter.get_finished_spans()
    assert len(spans) == 3
    for span in spans:
        assert "CANARY" not in str(dict(span.attributes or {}))
        assert (span.attributes or {})["gen_ai.operation.name"] == "chat"
    assert processor.failed == 3
    assert processor.guard.errors == 3
    assert processor.recorded == 0
    (first,) = _errors(caplog)
    assert first.name == LOGGER
    assert first.exc_info is not None
    assert "recording failed" in first.getMessage()
    for file in (tmp_path / "sessions").glob("*.jsonl"):
        assert {r.type for r in loopscribe.read(file)} <= set(_OWN)


def test_a_failing_mapping_never_breaks_the_claude_agent_sdk_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every batch's mapping fails: each append still succeeds, every entry is kept verbatim,
    each failure is counted and only the first is logged at ERROR."""
    from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore
    from loopscribe.adapters.claude_agent_sdk._live import LiveClaudeCode
    from tests.adapters.test_claude_agent_sdk import BIG, KEY, feed, written_order

    def broken(self: object) -> None:
        raise RuntimeError("mapping broke")

    monkeypatch.setattr(LiveClaudeCode, "end_batch", broken)
    entries = written_order(BIG)[:40]
    main = [entry for subpath, entry in entries if subpath is None]
    with (
        caplog.at_level(logging.DEBUG, logger=LOGGER),
        LoopscribeSessionStore(tmp_path / "store") as store,
    ):
        asyncio.run(feed(store, entries, 10))
        loaded = asyncio.run(store.load(KEY))
        errors = store.mapping_errors
    assert loaded == main
    assert errors >= 4
    (first,) = _errors(caplog)
    assert first.name == LOGGER
    assert first.exc_info is not None
    assert "Claude Agent SDK store" in first.getMessage()

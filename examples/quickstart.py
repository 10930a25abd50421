"""Record a scripted agent session, export its spans, then read it back.

A two-turn conversation: the model asks for a tool, the first model call of
turn two fails with a rate limit and is retried, a checkpoint is saved after
each turn. Spans go to the collector named by ``OTEL_EXPORTER_OTLP_ENDPOINT``
or, when it is unset, to an OTLP JSON lines file beside the session.

Run it with ``make demo`` or ``python examples/quickstart.py [DIR]``.
"""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from loopscribe import (
    AssistantMessage,
    Execution,
    Run,
    Session,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    read,
)
from loopscribe import events as ev
from loopscribe.cli import main as export_cli
from loopscribe.otel import (
    SpanBridge,
    describe_destination,
    span_id,
    trace_id,
)


class Clock:
    """A scripted clock, so the recorded times read like a real session."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def tick(self, millis: int) -> datetime:
        self.now += timedelta(milliseconds=millis)
        return self.now


def model_call(
    run: Run,
    clock: Clock,
    ex: Execution,
    history: list[object],
    reply: AssistantMessage | None,
    error: str | None = None,
) -> None:
    """Record one model call: start, request, and its end (success or failure)."""
    run.record(ev.model_exec_start(ex, "demo-model-1", provider="demo", timestamp=clock.tick(5)))
    run.record(
        ev.model_request(
            ex,
            history,
            tools=[{"name": "get_weather", "parameters": {"type": "object"}}],
            config={"temperature": 0.2, "api_key": "sk-never-written"},
            model="demo-model-1",
            timestamp=clock.tick(1),
        )
    )
    if reply is None:
        run.record(ev.model_exec_end(ex, error=error, timestamp=clock.tick(300)))
        return
    run.record(ev.model_exec_end(ex, message=reply, usage=reply.usage, timestamp=clock.tick(900)))
    run.record(ev.message_end(ex, reply, timestamp=clock.tick(1)))


def record_session(path: Path) -> Session:
    """Record the scripted conversation into a new file at ``path``, then export its spans.

    ``loopscribe export`` keeps a cursor beside the session, so exporting it
    again later sends nothing twice. (A host exporting live passes
    ``SpanBridge(default_processor(path), file_uri=path)`` as an observer.)
    """
    session = record_conversation(path, None)
    if export_cli(["export", str(path)]) != 0:
        raise SystemExit("the spans could not be exported (see above)")
    return session


def record_conversation(path: Path, bridge: SpanBridge | None) -> Session:
    """The scripted host loop."""
    agent = Execution("agent", "agent")
    history: list[object] = [UserMessage("What's the weather in Lisbon?")]
    observers = [bridge] if bridge is not None else []
    with Session.create(path, metadata={"title": "weather demo"}, observers=observers) as session:
        # Every record after session_start carries a time from the script.
        clock = Clock(next(iter(read(path))).ts)
        run = session.begin_run(timestamp=clock.tick(1))
        record_turns(run, clock, agent, history)
        run.close(timestamp=clock.tick(1))
    return session


def record_turns(run: Run, clock: Clock, agent: Execution, history: list[object]) -> None:
    """The two scripted turns."""
    run.record(ev.agent_start(agent, "weather-bot", timestamp=clock.tick(0)))
    run.record(ev.message_end(None, history[0], timestamp=clock.tick(1)))

    # Turn 1: the model asks for a tool; the tool runs.
    turn1 = Execution("turn_1", "turn", parent_id="agent")
    run.record(ev.turn_start(turn1, 1, timestamp=clock.tick(1)))
    call = ToolCall("call_1", "get_weather", {"city": "Lisbon"})
    ask = AssistantMessage((call,), model="demo-model-1", usage=Usage(42, 12))
    model_call(run, clock, Execution("model_1", "model", parent_id="turn_1"), history, ask)
    history.append(ask)
    tool = Execution("call_1", "tool", parent_id="turn_1")
    run.record(ev.tool_exec_start(tool, "get_weather", call.arguments, timestamp=clock.tick(2)))
    run.record(ev.tool_invoke_start(tool, "get_weather", call.arguments, timestamp=clock.tick(1)))
    result = ToolResultMessage("call_1", "get_weather", (TextContent("21°C, sunny"),))
    run.record(ev.tool_exec_end(tool, "get_weather", result, timestamp=clock.tick(120)))
    history.append(result)
    run.record(ev.turn_end(turn1, 1, stop_reason="tool_use", timestamp=clock.tick(1)))
    run.save_checkpoint({"history": history}, timestamp=clock.tick(1))

    # Turn 2: rate-limited once, retried as attempt 2.
    turn2 = Execution("turn_2", "turn", parent_id="agent")
    run.record(ev.turn_start(turn2, 2, timestamp=clock.tick(1)))
    first = Execution("model_2", "model", attempt=1, parent_id="turn_2")
    model_call(run, clock, first, history, None, error="RateLimitError")
    run.record(
        ev.retry_scheduled(
            first, next_attempt=2, delay_ms=250, error="RateLimitError", timestamp=clock.tick(1)
        )
    )
    clock.tick(250)
    answer = AssistantMessage(
        (TextContent("It is 21°C and sunny in Lisbon."),),
        model="demo-model-1",
        usage=Usage(71, 15),
        stop_reason="end_turn",
    )
    second = Execution("model_2", "model", attempt=2, parent_id="turn_2")
    model_call(run, clock, second, history, answer)
    history.append(answer)
    run.record(ev.turn_end(turn2, 2, stop_reason="end_turn", timestamp=clock.tick(1)))
    run.save_checkpoint({"history": history}, timestamp=clock.tick(1))
    run.record(
        ev.agent_end(agent, "weather-bot", stop_reason="end_turn", turns=2, timestamp=clock.tick(1))
    )


def summarize(path: Path) -> None:
    """Print a short summary read back from the file."""
    records = list(read(path))
    kinds = Counter(r.type for r in records)
    tokens_in = tokens_out = retries = 0
    for r in records:
        usage = r.data.get("usage") if r.type == "model_exec_end" else None
        if isinstance(usage, Usage):
            tokens_in += usage.input_tokens
            tokens_out += usage.output_tokens
        if r.execution is not None and r.execution.attempt > 1 and r.type == "model_exec_start":
            retries += 1
    failed = sum(1 for r in records if r.type == "model_exec_end" and "error" in r.data)
    print(f"records: {len(records)} in {kinds['run_start']} run(s)")
    print(f"model calls: {kinds['model_exec_end']} ({failed} failed, {retries} retried)")
    print(f"tool calls: {kinds['tool_exec_end']}")
    print(f"tokens: {tokens_in} in / {tokens_out} out")
    print(f"checkpoints: {kinds['checkpoint']}")
    last = next(r for r in reversed(records) if r.type == "message_end")
    print(f"final answer: {last.data['message'].text!r}")


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-sessions")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"quickstart-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}.jsonl"
    session = record_session(path)
    print(f"session {session.id} recorded to {path}")
    summarize(path)
    print(f"spans exported to {describe_destination(path)}")
    run_id = next(r.run_id for r in read(path) if r.type == "run_start")
    assert run_id is not None
    trace, span = trace_id(session.id, run_id), span_id(session.id, run_id, "call_1", 1)
    print(f"tool span 'execute_tool get_weather': trace_id {trace:032x} span_id {span:016x}")
    prog = loopscribe_command()
    print("its records, bodies included:")
    print(f"  {prog} --dir {folder} find {trace:032x}/{span:016x}")
    print("more to try:")
    print(f"  {prog} ls {folder}")
    print(f"  {prog} --dir {folder} show {session.id[:8]}")
    print(f"  {prog} stats {folder}")
    print(f"  {prog} --dir {folder} report {session.id[:8]} -o demo-report.html")
    print("sent again, nothing goes twice (a cursor beside the session remembers):")
    print(f"  {prog} export {folder}")


def loopscribe_command() -> str:
    """How to run ``loopscribe`` from here: by name when it is on PATH, else by its path."""
    if shutil.which("loopscribe"):
        return "loopscribe"
    exe = Path(sys.executable).with_name("loopscribe")
    try:
        return str(exe.relative_to(Path.cwd()))
    except ValueError:
        return str(exe)


if __name__ == "__main__":
    main()

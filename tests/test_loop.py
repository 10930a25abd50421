"""The reference AgentLoop: one host that exercises every event type."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopscribe import (
    AgentLoop,
    CallRef,
    Codec,
    Event,
    Execution,
    LLMRequest,
    LoopContext,
    ModelExecution,
    ModelExecutor,
    Recorder,
    Session,
    StreamEnd,
    ToolCall,
    ToolContext,
    ToolResultMessage,
    TransformContext,
    Usage,
    UserMessage,
    checkpoint_turns,
    read,
)
from loopscribe import events as ev
from loopscribe.otel import replay
from loopscribe.testing import captured_spans, span_tree


class ScriptedModel:
    """Answers from a script; an entry that is an exception fails that attempt."""

    name = "scripted-1"

    def __init__(self, script: list[list[Any] | Exception]) -> None:
        self.script = list(script)
        self.seen: list[int] = []

    def stream(self, request: LLMRequest) -> Iterator[Any]:
        self.seen.append(len(request.messages))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            yield "partial"
            raise step
        yield from step


def weather(city: str) -> Generator[str, None, str]:
    """A generator tool: progress first, then the result."""
    yield f"looking up {city}"
    return f"21C in {city}"


def broken(**kwargs: Any) -> str:
    """A tool that always fails."""
    raise ValueError("sensor offline")


def make_loop(transform: bool = True) -> tuple[AgentLoop, ScriptedModel]:
    """A loop whose model calls two tools, fails once, is cut by length once, then answers."""
    model = ScriptedModel(
        [
            [
                ToolCall("call_1", "weather", {"city": "Lisbon"}),
                StreamEnd("tool_use", Usage(10, 5)),
            ],
            ConnectionError("rate limited"),
            [ToolCall("call_2", "broken", {}), StreamEnd("tool_use", Usage(20, 5))],
            ["It is 21C and", StreamEnd("length", Usage(30, 5))],
            [" sunny.", StreamEnd("end_turn", Usage(40, 5))],
        ]
    )
    loop = AgentLoop(
        model,
        {"weather": weather, "broken": broken},
        name="weather-bot",
        transform_context=(lambda msgs: msgs[-6:]) if transform else None,
    )
    return loop, model


def test_loop_yields_the_whole_event_vocabulary() -> None:
    """One run publishes every event type of the vocabulary, transient ones included."""
    loop, _ = make_loop()
    kinds = {e.type for e in loop.run("Weather?")}
    expected = {
        ev.AGENT_START,
        ev.AGENT_END,
        ev.TURN_START,
        ev.TURN_END,
        ev.CONTEXT_TRANSFORM_START,
        ev.CONTEXT_TRANSFORM_END,
        ev.MODEL_EXEC_START,
        ev.MODEL_REQUEST,
        ev.MODEL_RESPONSE,
        ev.MODEL_EXEC_END,
        ev.MESSAGE_START,
        ev.MESSAGE_UPDATE,
        ev.MESSAGE_END,
        ev.TOOL_EXEC_START,
        ev.TOOL_INVOKE_START,
        ev.TOOL_EXEC_UPDATE,
        ev.TOOL_EXEC_END,
        ev.RETRY_SCHEDULED,
    }
    assert expected <= kinds
    # The loop's conversation call reports progress as message events, not model_stream.
    assert ev.MODEL_STREAM not in kinds


def test_loop_recording_reads_back_with_retries_and_tool_errors(session_path: Path) -> None:
    """The recorded loop has attempts, tool errors and the conversation, and spans nest right."""
    loop, model = make_loop()
    with Session.create(session_path) as s, s.begin_run() as run:
        for event in loop.run("Weather?"):
            run.record(event)
    records = list(read(session_path))
    attempts = [
        (r.execution.id, r.execution.attempt)
        for r in records
        if r.type == "model_exec_end" and r.execution is not None
    ]
    assert attempts == [
        ("model_1", 1),
        ("model_2", 1),
        ("model_2", 2),
        ("model_3", 1),
        ("model_4", 1),
    ]
    tool_ends = [r.data for r in records if r.type == "tool_exec_end"]
    assert [d["is_error"] for d in tool_ends] == [False, True]
    assert tool_ends[1]["error"]["type"] == "ValueError"
    committed = [r.data["message"] for r in records if r.type == "message_end"]
    assert isinstance(committed[2], ToolResultMessage)
    assert committed[-1].text == " sunny."
    assert [r.type for r in records].count("model_response") == 1  # the length decision
    assert records[-2].type == "agent_end"
    assert model.seen[0] == 1
    captured = captured_spans()
    replay(session_path, captured.processor)
    tree = span_tree(captured.spans)
    assert "invoke_agent weather-bot" in tree.splitlines()[0]
    for name in ("chat scripted-1", "execute_tool weather", "execute_tool broken", "turn"):
        assert name in tree
    by_id = {s.context.span_id: s for s in captured.spans}
    tool = next(s for s in captured.spans if s.name == "execute_tool weather")
    assert tool.parent is not None
    assert (by_id[tool.parent.span_id].attributes or {})["loopscribe.execution.id"] == "turn_1"
    retries = [
        s
        for s in captured.spans
        if (s.attributes or {}).get("loopscribe.execution.id") == "model_2"
    ]
    assert sorted(int(str((s.attributes or {})["loopscribe.attempt"])) for s in retries) == [1, 2]
    assert {s.parent.span_id for s in retries if s.parent} == {
        next(
            s.context.span_id
            for s in captured.spans
            if (s.attributes or {}).get("loopscribe.execution.id") == "turn_2"
        )
    }


def test_loop_gives_up_after_max_attempts() -> None:
    """When every attempt fails, the turn and the agent end with an error."""
    model = ScriptedModel([ConnectionError("a"), ConnectionError("b")])
    loop = AgentLoop(model, max_attempts=2)
    events = list(loop.run("hi"))
    assert [e.type for e in events].count("retry_scheduled") == 1
    assert events[-1].type == "agent_end"
    assert events[-1].data["error"] == {"type": "ModelError", "message": ""}


def test_unknown_tool_is_an_error_result_not_a_crash() -> None:
    """A tool the model invents becomes an error result the model sees."""
    model = ScriptedModel([[ToolCall("c", "nope", {})], ["done"]])
    loop = AgentLoop(model)
    events = list(loop.run("hi"))
    end = next(e for e in events if e.type == "tool_exec_end")
    assert end.data["is_error"] is True
    assert end.data["error"]["type"] == "LookupError"
    assert not any(e.type == "tool_invoke_start" for e in events)


def test_context_transform_summary_is_a_recorded_call_on_the_loops_stream(
    session_path: Path,
) -> None:
    """A transform that summarizes through the executor it is given leaves a recorded model call."""
    from loopscribe import SystemMessage

    summarizer = ScriptedModel([["the user said hi"]])
    summarizer.name = "summarizer-1"
    model = ScriptedModel([["hello!", StreamEnd("stop")]])

    def summarize(messages: list[Any], context: TransformContext) -> list[Any]:
        result = context.call(messages, model=summarizer)
        assert result.ok
        assert result.message is not None
        return [SystemMessage(result.message.text)]

    loop = AgentLoop(model, transform_context=summarize)
    with Session.create(session_path) as s, s.begin_run() as run:
        for event in loop.run("hi"):
            run.record(event)
    records = list(read(session_path))
    summary = [r for r in records if r.execution and r.execution.id == "summary_1"]
    assert [r.type for r in summary] == ["model_exec_start", "model_request", "model_exec_end"]
    assert all(r.execution and r.execution.parent_id == "context_1" for r in summary)
    assert summary[-1].data["message"].text == "the user said hi"
    kinds = [r.type for r in records]
    # Inside the context transform, before the conversation call.
    assert (
        kinds.index("context_transform_start")
        < records.index(summary[0])
        < kinds.index("context_transform_end")
    )
    assert model.seen == [1]  # the conversation call got the summary only
    spans = captured_spans()
    replay(session_path, spans.processor)
    assert spans.named("chat summarizer-1")


def test_one_argument_transforms_still_work() -> None:
    """A transform that takes only the messages is called as before."""
    model = ScriptedModel([["ok"]])
    loop = AgentLoop(model, transform_context=lambda messages: messages[-1:])
    assert [e.type for e in loop.run("hi")][-1] == "agent_end"
    assert model.seen == [1]


def test_checkpoint_turns_saves_the_loop_state_at_each_turn_and_restores_it(
    session_path: Path,
) -> None:
    """checkpoint_turns checkpoints after each turn_end; a new loop restores the conversation."""
    from loopscribe import checkpoint_turns

    model = ScriptedModel(
        [[ToolCall("c1", "weather", {"city": "Lisbon"}), StreamEnd("tool_use")], ["sunny"]]
    )
    loop = AgentLoop(model, tools={"weather": weather})
    with Session.create(session_path) as s, s.begin_run() as run:
        seen = [e.type for e in checkpoint_turns(run, loop, loop.run("Weather?"))]
    assert seen.count("turn_end") == 2
    kinds = [r.type for r in read(session_path)]
    turn_ends = [i for i, k in enumerate(kinds) if k == "turn_end"]
    assert [kinds[i + 1] for i in turn_ends] == ["checkpoint", "checkpoint"]
    with Session.open(session_path) as again:
        state = again.load_checkpoint()
    restored = AgentLoop(ScriptedModel([["again"]]))
    history = restored.restore(state)
    assert [type(m).__name__ for m in history] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    assert history[-1].text == "sunny"
    events = list(restored.run("And tomorrow?", history))
    assert restored.messages[: len(history)] == history
    assert events[-1].type == "agent_end"


# -- times from the source ---------------------------------------------------------------


class ManualClock:
    """A clock that moves only when told to: time passes where the test says it does."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class SlowModel:
    """Streams scripted chunks, each taking ``per_chunk`` seconds of the manual clock."""

    name = "slow-1"

    def __init__(self, clock: ManualClock, script: list[list[Any]], per_chunk: float) -> None:
        self.clock, self.script, self.per_chunk = clock, list(script), per_chunk

    def stream(self, request: LLMRequest) -> Iterator[Any]:
        for chunk in self.script.pop(0):
            self.clock.advance(self.per_chunk)
            yield chunk


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def test_each_event_is_stamped_when_it_happens_so_spans_last_as_long_as_the_work(
    session_path: Path,
) -> None:
    """A 0.6 s model call and a 1.5 s tool are 0.6 s and 1.5 s apart in the file and in spans."""
    clock = ManualClock()
    model = SlowModel(
        clock, [[ToolCall("c1", "slow", {}), "x", StreamEnd("tool_use")], ["a", "b", "c"]], 0.2
    )

    def slow() -> str:
        clock.advance(1.5)
        return "done"

    loop = AgentLoop(model, {"slow": slow}, clock=clock)
    with Session.create(session_path) as s, s.begin_run() as run:
        for event in loop.run("go"):
            run.record(event)
    records = list(read(session_path))

    def at(kind: str, ex_id: str) -> datetime:
        return next(
            r.ts for r in records if r.type == kind and r.execution and r.execution.id == ex_id
        )

    for model_id in ("model_1", "model_2"):
        start = at("model_exec_start", model_id)
        assert at("model_request", model_id) == start  # sent before the model took its time
        assert _seconds(at("model_exec_end", model_id), start) == pytest.approx(0.6)
        assert at("message_start", model_id) > start  # stamped with its first chunk
    assert _seconds(at("tool_exec_end", "c1"), at("tool_exec_start", "c1")) == pytest.approx(1.5)
    assert _seconds(at("turn_end", "turn_1"), at("turn_start", "turn_1")) == pytest.approx(2.1)
    captured = captured_spans()
    replay(session_path, captured.processor)
    chats = captured.named("chat slow-1")
    assert len(chats) == 2
    for span in chats:
        assert span.end_time is not None
        assert span.start_time is not None
        assert span.end_time - span.start_time == 600_000_000
    (tool,) = captured.named("execute_tool slow")
    assert tool.end_time is not None
    assert tool.start_time is not None
    assert tool.end_time - tool.start_time == 1_500_000_000


# -- context for tools -------------------------------------------------------------------


def test_a_tool_with_a_keyword_only_context_gets_its_coordinates(session_path: Path) -> None:
    """context.execution, .ref and the session and run IDs name the tool call itself."""
    seen: list[ToolContext] = []

    def where(city: str, *, context: ToolContext) -> str:
        seen.append(context)
        return city

    model = ScriptedModel([[ToolCall("call_9", "where", {"city": "Porto"})], ["ok"]])
    loop = AgentLoop(model, {"where": where})
    with Session.create(session_path) as s, s.begin_run() as run:
        for event in loop.run("hi", run=run):
            run.record(event)
    (context,) = seen
    assert context.execution == Execution("call_9", "tool", 1, "turn_1")
    assert context.tool == "where"
    assert (context.session_id, context.run_id) == (s.id, run.id)
    assert context.ref == run.ref(context.execution)


def test_a_tool_learns_its_run_from_the_executors_recorder(session_path: Path) -> None:
    """Without run=, the run of a Recorder on the loop's executor is the tool's run."""
    refs: list[CallRef | None] = []

    def where(*, context: ToolContext) -> str:
        refs.append(context.ref)
        return "here"

    model = ScriptedModel([[ToolCall("c1", "where", {})], ["ok"]])
    with Session.create(session_path) as s, s.begin_run() as run:
        loop = AgentLoop(model, {"where": where}, executor=ModelExecutor(on_event=Recorder(run)))
        list(loop.run("hi"))
    assert refs == [CallRef(s.id, run.id, "c1", 1)]
    assert list(
        AgentLoop(ScriptedModel([[ToolCall("c1", "where", {})], ["ok"]]), {"where": where}).run(
            "hi"
        )
    )
    assert refs[-1] is None  # no run known: no ref


def test_tools_without_a_context_parameter_get_the_arguments_alone() -> None:
    """A tool taking **kwargs, or context as an ordinary argument, is called as tool(**args)."""
    got: list[dict[str, Any]] = []

    def anything(**kwargs: Any) -> str:
        got.append(kwargs)
        return "ok"

    def takes_context_as_argument(context: str) -> str:
        got.append({"context": context})
        return "ok"

    model = ScriptedModel(
        [
            [ToolCall("c1", "anything", {"a": 1}), ToolCall("c2", "arg", {"context": "mine"})],
            ["done"],
        ]
    )
    loop = AgentLoop(model, {"anything": anything, "arg": takes_context_as_argument})
    events = list(loop.run("hi"))
    assert got == [{"a": 1}, {"context": "mine"}]
    assert not any(e.data.get("is_error") for e in events if e.type == "tool_exec_end")


def test_a_model_call_inside_a_tool_nests_under_the_tool_call(session_path: Path) -> None:
    """Calls through context.call and through the tool's own executor are children of the tool."""
    inner = ScriptedModel([["a summary"], ["a translation"]])
    inner.name = "inner-1"
    own = ModelExecutor()  # the tool's own, from its closure: no observer at all

    def research(topic: str, *, context: ToolContext) -> str:
        first = context.call([UserMessage(f"summarize {topic}")], model=inner)
        second = own.call(
            inner, ModelExecution(Execution("translate", "model"), LLMRequest([UserMessage("x")]))
        )
        return f"{first.message.text if first.message else ''}; {second.ok}"

    model = ScriptedModel([[ToolCall("call_1", "research", {"topic": "tides"})], ["ok"]])
    loop = AgentLoop(model, {"research": research})
    with Session.create(session_path) as s, s.begin_run() as run:
        for event in loop.run("hi", run=run):
            run.record(event)
    records = list(read(session_path))
    nested = {
        r.execution.id: r.execution.parent_id
        for r in records
        if r.type == "model_exec_end" and r.execution is not None
    }
    assert nested == {
        "model_1": "turn_1",
        "call_1_model": "call_1",
        "translate": "call_1",
        "model_2": "turn_2",
    }
    kinds = [(r.type, r.execution.id if r.execution else None) for r in records]
    # On the stream between the tool's invocation and its end.
    assert (
        kinds.index(("tool_invoke_start", "call_1"))
        < kinds.index(("model_exec_end", "translate"))
        < kinds.index(("tool_exec_end", "call_1"))
    )
    captured = captured_spans()
    replay(session_path, captured.processor)
    tree = span_tree(captured.spans)
    assert "      execute_tool research\n        chat inner-1\n        chat inner-1" in tree


def test_a_model_argument_named_context_cannot_reach_a_tool_that_takes_the_context() -> None:
    """The clash is the tool's error result, never a silently dropped argument."""

    def tool(*, context: ToolContext) -> str:
        return "unreachable"

    model = ScriptedModel([[ToolCall("c1", "tool", {"context": "model's"})], ["done"]])
    events = list(AgentLoop(model, {"tool": tool}).run("hi"))
    end = next(e for e in events if e.type == "tool_exec_end")
    assert end.data["error"]["type"] == "TypeError"
    assert "context" in end.data["error"]["message"]


# -- the loop's stream or the executor's observer ----------------------------------------


def _calls_loop(executor: ModelExecutor) -> AgentLoop:
    """A loop whose model calls come from the conversation, a summary and a tool."""
    summarizer = ScriptedModel([["short"]])
    summarizer.name = "summarizer-1"

    def summarize(messages: list[Any], context: TransformContext) -> list[Any]:
        if context.turn == 1:
            context.call(messages, model=summarizer)
        return messages

    def ask(*, context: ToolContext) -> str:
        result = context.call([UserMessage("inner")], model=ScriptedModel([["sub-answer"]]))
        return "answered" if result.ok else "failed"

    model = ScriptedModel([[ToolCall("t1", "ask", {})], ["done", StreamEnd("stop")]])
    return AgentLoop(model, {"ask": ask}, executor=executor, transform_context=summarize)


_MODEL_FACTS = ("model_exec_start", "model_request", "model_exec_end")
_ALL_CALLS = ["summary_1", "model_1", "t1_model", "model_2"]


def _model_facts(path: Path) -> list[tuple[str, str]]:
    """(type, execution id) of every model fact in the file, in order."""
    return [
        (r.type, r.execution.id)
        for r in read(path)
        if r.type in _MODEL_FACTS and r.execution is not None
    ]


def _once_each(facts: list[tuple[str, str]]) -> None:
    for call in _ALL_CALLS:
        assert [t for t, ex in facts if ex == call] == list(_MODEL_FACTS), call


def test_recording_the_loops_stream_writes_each_call_once(session_path: Path) -> None:
    """With an executor that only logs, the stream holds every call's facts once."""
    logged: list[Event] = []
    loop = _calls_loop(ModelExecutor(on_event=logged.append))
    with Session.create(session_path) as s, s.begin_run() as run:
        for event in loop.run("hi", run=run):
            run.record(event)
    _once_each(_model_facts(session_path))
    assert [e.type for e in logged].count("model_exec_end") == len(_ALL_CALLS)


def test_recording_the_shared_executors_observer_writes_each_call_once(session_path: Path) -> None:
    """A Recorder on the loop's executor sees every call the loop makes, once, in order."""
    with Session.create(session_path) as s, s.begin_run() as run:
        loop = _calls_loop(ModelExecutor(on_event=Recorder(run)))
        stream = list(loop.run("hi", run=run))  # drained, never recorded
    facts = _model_facts(session_path)
    _once_each(facts)
    assert [ex for t, ex in facts if t == "model_exec_start"] == _ALL_CALLS
    kinds = [r.type for r in read(session_path)]
    assert "turn_start" not in kinds  # only the model facts went through the observer
    assert [
        (e.type, e.execution.id) for e in stream if e.type in _MODEL_FACTS and e.execution
    ] == facts


def test_recording_both_the_stream_and_the_observer_writes_each_call_once(
    session_path: Path,
) -> None:
    """Each model fact reaches run.record twice, as the same object in a row: written once."""
    with Session.create(session_path) as s, s.begin_run() as run:
        loop = _calls_loop(ModelExecutor(on_event=Recorder(run)))
        for event in loop.run("hi", run=run):
            run.record(event)
    _once_each(_model_facts(session_path))
    records = list(read(session_path))
    assert [r.seq for r in records] == list(range(len(records)))
    # The loop's own facts are there once too: the prompt, two replies, one tool result.
    assert sum(r.type == "message_end" for r in records) == 4


# -- artifacts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """An application's own artifact type, registered with the session's codec."""

    title: str
    body: str


def _report_codec() -> Codec:
    codec = Codec()
    codec.register(Report, "report")
    return codec


def test_a_transforms_summary_passes_the_artifacts_it_staged(session_path: Path) -> None:
    """context_transform_end carries the artifacts the transform staged, typed, by name."""

    def compact(messages: list[Any], context: TransformContext) -> list[Any]:
        context.stage_artifact("history", Report("before turn 1", "the user said hi"))
        return messages[-1:]

    loop = AgentLoop(ScriptedModel([["ok"]]), transform_context=compact)
    with Session.create(session_path, _report_codec()) as s, s.begin_run() as run:
        for event in loop.run("hi"):
            run.record(event)
    records = list(read(session_path, codec=_report_codec()))
    end = next(r for r in records if r.type == "context_transform_end")
    assert end.data["artifacts"] == {"history": Report("before turn 1", "the user said hi")}
    assert records[-2].type == "agent_end"
    assert records[-2].data["artifacts"] == end.data["artifacts"]


def test_a_terminal_listener_sees_the_artifacts_written_after_the_run(session_path: Path) -> None:
    """after_run runs before agent_end: its artifacts are in agent_end and the last checkpoint."""
    summarizer = ScriptedModel([["2 tool calls, 1 answer"]])

    def note(*, context: ToolContext) -> str:
        context.stage_artifact("note", {"from": context.execution.id})
        return "noted"

    def after_run(context: LoopContext) -> None:
        result = context.call(list(context.messages), model=summarizer)
        context.stage_artifact(
            "summary", Report("run", result.message.text if result.message else "")
        )

    model = ScriptedModel([[ToolCall("c1", "note", {})], ["done"]])
    loop = AgentLoop(model, {"note": note}, after_run=after_run)
    with Session.create(session_path, _report_codec()) as s, s.begin_run() as run:
        list(checkpoint_turns(run, loop, loop.run("hi", run=run)))
    records = list(read(session_path, codec=_report_codec()))
    kinds = [r.type for r in records]
    assert kinds[-3:] == ["agent_end", "checkpoint", "run_close"]
    expected = {"note": {"from": "c1"}, "summary": Report("run", "2 tool calls, 1 answer")}
    assert records[-3].data["artifacts"] == expected
    summary_call = next(
        r
        for r in records
        if r.type == "model_exec_end" and r.execution and r.execution.id == "agent_model"
    )
    assert summary_call.execution is not None
    assert summary_call.execution.parent_id == "agent"
    assert summary_call.seq < records[-3].seq  # the hook's work precedes the terminal event
    with Session.open(session_path, _report_codec()) as again:
        state = again.load_checkpoint()
    restored = AgentLoop(ScriptedModel([]))
    restored.restore(state)
    assert restored.artifacts == expected


def test_a_failing_after_run_hook_still_ends_the_run_on_record() -> None:
    """agent_end records the hook's failure; then the failure propagates to the host."""

    def after_run(context: LoopContext) -> None:
        raise RuntimeError("disk full")

    events: list[Event] = []
    stream = AgentLoop(ScriptedModel([["ok"]]), after_run=after_run).run("hi")
    with pytest.raises(RuntimeError, match="disk full"):
        events.extend(stream)
    assert events[-1].type == "agent_end"
    assert events[-1].data["error"]["type"] == "RuntimeError"


def test_an_interrupted_loop_call_still_ends_on_record_through_the_observer(
    session_path: Path,
) -> None:
    """KeyboardInterrupt mid-stream: the observer records model_exec_end, then it propagates."""

    class Interrupted:
        name = "m-int"

        def stream(self, request: LLMRequest) -> Iterator[Any]:
            yield "so far"
            raise KeyboardInterrupt

    with Session.create(session_path) as s, s.begin_run() as run:
        loop = AgentLoop(Interrupted(), executor=ModelExecutor(on_event=Recorder(run)))
        with pytest.raises(KeyboardInterrupt):
            list(loop.run("hi"))
    (end,) = [r for r in read(session_path) if r.type == "model_exec_end"]
    assert end.data["error"]["type"] == "KeyboardInterrupt"
    assert end.data["partial_message"].text == "so far"

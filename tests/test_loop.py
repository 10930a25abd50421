"""The reference AgentLoop: one host that exercises every event type."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from loopscribe import (
    AgentLoop,
    LLMRequest,
    Session,
    StreamEnd,
    ToolCall,
    ToolResultMessage,
    Usage,
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
    for name in ("chat scripted-1", "execute_tool weather", "execute_tool broken", "turn turn_2"):
        assert name in tree
    by_id = {s.context.span_id: s for s in captured.spans}
    tool = next(s for s in captured.spans if s.name == "execute_tool weather")
    assert tool.parent is not None
    assert by_id[tool.parent.span_id].name == "turn turn_1"
    retries = [
        s
        for s in captured.spans
        if (s.attributes or {}).get("loopscribe.execution.id") == "model_2"
    ]
    assert sorted(int(str((s.attributes or {})["loopscribe.attempt"])) for s in retries) == [1, 2]
    assert {s.parent.span_id for s in retries if s.parent} == {
        next(s.context.span_id for s in captured.spans if s.name == "turn turn_2")
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
    from loopscribe import SystemMessage, TransformContext

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

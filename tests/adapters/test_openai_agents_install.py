"""install() / uninstall() of the OpenAI Agents adapter, with the real SDK and scripted models."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool
from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner
from agents.tracing.provider import DefaultTraceProvider

import loopscribe
from loopscribe import Session
from loopscribe.adapters.openai_agents import (
    LoopscribeHooks,
    LoopscribeTraceProcessor,
    install,
    installed,
    uninstall,
)
from tests.adapters.test_openai_agents import (
    OFFLINE,
    ScriptedResponses,
    api_call,
    api_response,
    api_text,
    reply,
    responses_api,
    tool_call,
)


@pytest.fixture
def runner() -> Iterator[AgentRunner]:
    """The SDK's default runner before the test, put back after it whatever happened."""
    uninstall()
    before = get_default_agent_runner()
    try:
        yield before
    finally:
        uninstall()
        set_default_agent_runner(before)


def processors(provider: DefaultTraceProvider) -> tuple[Any, ...]:
    """The SDK's registered processors (it has no public getter)."""
    return tuple(provider._multi_processor._processors)


@function_tool
def stop_recording(reason: str) -> str:
    """Uninstall loopscribe from inside the run, as a host shutting down would."""
    uninstall()
    return f"stopped: {reason}"


def stopping_agent() -> Agent[Any]:
    model = ScriptedResponses(
        [[tool_call("stop_recording", {"reason": "shutdown"}, "call_1")], [reply("bye")]]
    )
    return Agent(name="ops", model=model, tools=[stop_recording])


def traced_agent(*script: dict[str, Any]) -> Agent[Any]:
    """An agent whose OpenAI Responses model emits the SDK's response spans."""
    model = OpenAIResponsesModel("gpt-4.1", responses_api(list(script)))
    return Agent(name="ops", model=model, tools=[stop_recording])


def test_install_twice_wraps_once_and_uninstall_restores_the_runner_exactly(
    runner: AgentRunner,
) -> None:
    install()
    wrapped = get_default_agent_runner()
    assert installed()
    assert wrapped is not runner
    install()
    assert get_default_agent_runner() is wrapped
    uninstall()
    assert get_default_agent_runner() is runner
    assert not installed()
    uninstall()  # twice: nothing left to undo
    assert get_default_agent_runner() is runner


def test_a_runner_the_host_set_after_install_is_left_alone(runner: AgentRunner) -> None:
    install()
    own = AgentRunner()
    set_default_agent_runner(own)
    uninstall()
    assert get_default_agent_runner() is own


def test_hooks_install_the_runner_and_uninstall_removes_it(
    tmp_path: Path, runner: AgentRunner
) -> None:
    with Session.create(tmp_path / "s.jsonl") as session, session.begin_run() as run:
        LoopscribeHooks(run)
        assert installed()
        uninstall()
    assert get_default_agent_runner() is runner


def test_uninstall_in_the_middle_of_a_hooks_run_closes_what_is_open(
    tmp_path: Path, runner: AgentRunner
) -> None:
    """A tool uninstalls mid-run: the open tool, turn and agent end ``NotEnded``, nothing after."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        hooks = LoopscribeHooks(run)
        result = asyncio.run(hooks.run(stopping_agent(), "stop", run_config=OFFLINE))
    assert result.final_output == "bye"
    assert hooks.closed
    assert hooks.errors == 0
    assert get_default_agent_runner() is runner
    records = [r for r in loopscribe.read(path) if r.execution is not None]
    tail = [(r.type, r.execution.id if r.execution else None) for r in records[-3:]]
    assert tail == [("tool_exec_end", "call_1"), ("turn_end", "turn_1"), ("agent_end", "agent_1")]
    for record in records[-3:]:
        assert record.data["error"]["type"] == "NotEnded"
    assert records[-3].data["disposition"] == "cancelled"
    models = {r.execution.id for r in records if r.type == "model_exec_start" and r.execution}
    assert models == {"model_1"}


def test_install_for_a_run_records_through_the_trace_processor_until_uninstall(
    tmp_path: Path, agents_tracing: DefaultTraceProvider, runner: AgentRunner
) -> None:
    """install(run) registers one processor (twice: the same one); uninstall() removes it."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        processor = install(run)
        assert isinstance(processor, LoopscribeTraceProcessor)
        assert install(run) is processor
        assert [p for p in processors(agents_tracing) if p is processor] == [processor]
        answer = asyncio.run(
            Runner.run(traced_agent(api_response("resp_1", [api_text("hello")])), "hi")
        )
        assert answer.final_output == "hello"
        uninstall()
        assert processor.closed
        assert all(p is not processor for p in processors(agents_tracing))
        written = len(list(loopscribe.read(path)))
        asyncio.run(Runner.run(traced_agent(api_response("resp_2", [api_text("again")])), "hi"))
        assert len(list(loopscribe.read(path))) == written  # nothing recorded after uninstall
    assert processor.errors == 0
    starts = [r for r in loopscribe.read(path) if r.type == "agent_start"]
    assert len(starts) == 1


def test_uninstall_in_the_middle_of_a_traced_run_closes_its_open_spans(
    tmp_path: Path, agents_tracing: DefaultTraceProvider, runner: AgentRunner
) -> None:
    path = tmp_path / "s.jsonl"
    agent = traced_agent(
        api_response("resp_1", [api_call("stop_recording", {"reason": "now"}, "call_1")]),
        api_response("resp_2", [api_text("bye")]),
    )
    with Session.create(path) as session, session.begin_run() as run:
        processor = install(run)
        assert processor is not None
        result = asyncio.run(Runner.run(agent, "stop"))
    assert result.final_output == "bye"
    assert processor.closed
    assert processor.errors == 0
    assert all(p is not processor for p in processors(agents_tracing))
    records = [r for r in loopscribe.read(path) if r.execution is not None]
    ended = {(r.type, r.execution.id): r.data.get("error") for r in records if r.execution}
    assert ended[("tool_exec_end", "call_1")] == {
        "type": "NotEnded",
        "message": "the host stopped recording before this execution ended",
    }
    assert (ended[("agent_end", "agent_1")] or {})["type"] == "NotEnded"
    assert [r.type for r in records].count("model_exec_end") == 1  # resp_2 came after

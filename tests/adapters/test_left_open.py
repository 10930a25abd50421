"""Shared policies in each adapter: what a host left open is closed, reused ids are attempts."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, Runner
from agents.tracing import agent_span, function_span, response_span, trace
from agents.tracing.provider import DefaultTraceProvider
from langchain_core.callbacks import CallbackManager
from openai.types.responses import Response

import loopscribe
from loopscribe import Session
from loopscribe.adapters.langchain import LoopscribeCallbackHandler
from loopscribe.adapters.openai_agents import LoopscribeTraceProcessor
from loopscribe.adapters.openai_agents._messages import stop_reason_of
from tests.adapters.test_openai_agents import (
    api_call,
    api_response,
    api_text,
    get_weather,
    responses_api,
)


def ends(path: Path) -> list[tuple[str, str, Any]]:
    return [
        (r.type, r.execution.id, (r.data.get("error") or {}).get("type"))
        for r in loopscribe.read(path)
        if r.execution is not None and r.type.endswith("_end")
    ]


def test_langchain_closes_what_a_failed_top_level_run_left_open(tmp_path: Path) -> None:
    """A tool LangChain never ended ends with the top-level run's error, before the run does."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        manager = CallbackManager.configure(inheritable_callbacks=[handler])
        root = manager.on_chain_start({"name": "graph"}, {"messages": []}, name="graph")
        child = root.get_child().on_chain_start({"name": "node"}, {}, name="node")
        child.get_child().on_tool_start(
            {"name": "get_weather"}, "Oslo", name="get_weather", tool_call_id="call_1"
        )
        root.on_chain_error(RuntimeError("the graph failed"))
        child.on_chain_end({})  # a late end of a closed run is ignored
    assert handler.errors == 0
    assert ends(path) == [
        ("tool_exec_end", "call_1", "RuntimeError"),
        ("agent_end", "node_1", "RuntimeError"),
        ("agent_end", "graph_1", "RuntimeError"),
    ]


def test_langchain_close_ends_every_run_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        manager = CallbackManager.configure(inheritable_callbacks=[handler])
        root = manager.on_chain_start({"name": "graph"}, {"messages": []}, name="graph")
        root.get_child().on_tool_start({"name": "t"}, "x", name="t", run_id=uuid.uuid4())
        handler.close()
        root.on_chain_end({})
    assert [(t, e) for t, _, e in ends(path)] == [
        ("tool_exec_end", "NotEnded"),
        ("agent_end", "NotEnded"),
    ]


def test_the_trace_processor_closes_what_a_trace_left_open(
    tmp_path: Path, agents_tracing: DefaultTraceProvider
) -> None:
    """Spans a trace never finished end with ``NotEnded`` when the trace ends, innermost first."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        processor = LoopscribeTraceProcessor(run)
        agents_tracing.register_processor(processor)
        with trace("weather"):
            agent = agent_span(name="weather")
            agent.start(mark_as_current=True)
            function_span(name="get_weather", parent=agent).start()
        processor.close()
    assert processor.errors == 0
    records = list(loopscribe.read(path))
    tool_end = next(r for r in records if r.type == "tool_exec_end")
    assert tool_end.data["disposition"] == "cancelled"
    assert ends(path) == [
        ("tool_exec_end", "tool_1", "NotEnded"),
        ("agent_end", "agent_1", "NotEnded"),
    ]


def test_the_trace_processor_records_a_reused_call_id_as_the_next_attempt(
    tmp_path: Path, agents_tracing: DefaultTraceProvider
) -> None:
    """Two runs whose model reuses ``call_1``: one execution, attempts 1 and 2 (no duplicate)."""

    def agent() -> Agent[Any]:
        client = responses_api(
            [
                api_response("resp_1", [api_call("get_weather", {"city": "Oslo"}, "call_1")]),
                api_response("resp_2", [api_text("ok")]),
            ]
        )
        model = OpenAIResponsesModel("gpt-4.1", client)
        return Agent(name="weather", model=model, tools=[get_weather])

    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        processor = LoopscribeTraceProcessor(run)
        agents_tracing.register_processor(processor)
        for text in ("first", "second"):
            asyncio.run(Runner.run(agent(), text))
        processor.close()
    tools = [
        (r.execution.id, r.execution.attempt)
        for r in loopscribe.read(path)
        if r.type == "tool_exec_end" and r.execution
    ]
    assert processor.errors == 0
    assert len(tools) == 2
    assert tools == [("call_1", 1), ("call_1", 2)], tools


@pytest.mark.parametrize(
    ("item", "stop"),
    [
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, "tool_calls"),
        ({"type": "local_shell_call", "call_id": "c", "action": {}}, "tool_calls"),
        ({"type": "apply_patch_call", "call_id": "c"}, "tool_calls"),
        ({"type": "web_search_call", "id": "ws"}, None),  # hosted: runs at the provider
        ({"type": "message", "role": "assistant", "content": []}, "stop"),
    ],
)
def test_both_agents_paths_read_one_stop_reason(
    tmp_path: Path, agents_tracing: DefaultTraceProvider, item: dict[str, Any], stop: str | None
) -> None:
    """The trace processor's finish reason is the hooks' (one list of client-run calls)."""
    response = Response.model_construct(
        id="resp_1",
        output=[item],
        usage=None,
        model="gpt-4.1",
        instructions=None,
        tools=[],
        temperature=None,
        top_p=None,
        max_output_tokens=None,
    )
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        processor = LoopscribeTraceProcessor(run)
        agents_tracing.register_processor(processor)
        with trace("weather"), agent_span(name="weather"), response_span(response=response):
            pass
        processor.close()
    assert processor.errors == 0
    (end,) = [r for r in loopscribe.read(path) if r.type == "model_exec_end"]
    assert end.data.get("stop_reason") == stop
    assert stop_reason_of([item]) == stop

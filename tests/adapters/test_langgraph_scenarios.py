"""LangGraph and LangChain scenarios users build: pauses, fan-out, retries, fallbacks, streams.

Each graph is real LangGraph (``StateGraph``, ``Send``, ``RetryPolicy``,
``interrupt``, ``ToolNode``, checkpointers) driven by LangChain's fake chat
models; each test reads the session back like a user would (``loopscribe.read``,
``loopscribe show``) and checks the spans ``SpanBridge`` hands to the SDK.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent
from langgraph.types import Command, RetryPolicy, Send, interrupt
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import loopscribe
from loopscribe import AssistantMessage, Record, Session, ToolResultMessage, UserMessage
from loopscribe.adapters.langchain import LoopscribeCallbackHandler
from loopscribe.otel import SpanBridge
from loopscribe.testing import captured_spans

from .test_langchain import RateLimitError, ScriptedChatModel, text_of
from .test_langgraph import (
    ToolCallingFake,
    ancestors,
    assert_calls_once,
    assert_streamed_run,
    call,
    ex,
    of_type,
    show,
    streamed_graph,
)

CANARY = "canary-body-5b1f"


@tool
def refund(order: str) -> str:
    """Refund an order, once a human approves."""
    # Odd values on purpose: a reserved key, a set, bytes.
    answer = interrupt({"approve_refund": order, "$ls": {"odd"}, "raw": b"\xff"})
    return f"refund of {order}: {answer} {CANARY}"


def refund_script() -> list[BaseMessage]:
    """Ask for a refund, then answer once it is done."""
    return [
        AIMessage("", id="ai-1", tool_calls=[call("refund", "r1", order=f"A-17 {CANARY}")]),
        AIMessage("Your refund is done.", id="ai-2"),
    ]


def refund_agent(model: ToolCallingFake, checkpointer: Any) -> Any:
    """A ReAct agent whose tool waits for a human."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LangGraphDeprecatedSinceV10: the import moved
        return create_react_agent(model, ToolNode([refund]), checkpointer=checkpointer)


def by_run(records: Sequence[Record]) -> list[list[Record]]:
    """The records of each loopscribe run, in order."""
    out: dict[str, list[Record]] = {}
    for record in records:
        if record.run_id is not None:
            out.setdefault(record.run_id, []).append(record)
    return list(out.values())


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """A span's attributes as a plain dict."""
    return dict(span.attributes or {})


def span_body_free(spans: Sequence[ReadableSpan]) -> bool:
    """No span carries a body: the canary is in the file only."""
    return not any(CANARY in repr(attrs(s)) + repr(s.events) for s in spans)


def assert_refund_paused(first: list[Record]) -> None:
    """Run 1 asked the model, started the tool and stopped on the interrupt, failing nothing."""
    assert_calls_once(first)
    (tool_end,) = of_type(first, "tool_exec_end")
    assert ex(tool_end).id == "r1"
    assert tool_end.data["disposition"] == "deferred"
    assert tool_end.data["is_error"] is False
    assert tool_end.data["details"]["reason"] == "interrupted"
    (asked,) = tool_end.data["details"]["interrupts"]
    value = asked["value"]
    assert (value["approve_refund"], value["$ls"]) == (f"A-17 {CANARY}", ["odd"])
    assert "bytes" in value["raw"]["snapshot_error"]
    assert not [r for r in first if "error" in r.data]
    root_end = [r for r in of_type(first, "agent_end") if ex(r).parent_id is None][-1]
    assert root_end.data["stop_reason"] == "interrupted"
    assert root_end.data["interrupts"] == [asked]


def assert_refund_resumed(records: list[Record]) -> None:
    """Run 2 resumed with the human's answer: the call ran again and the model answered."""
    first, second = by_run(records)
    assert_refund_paused(first)
    assert_calls_once(second)
    root = [r for r in of_type(second, "agent_start") if ex(r).parent_id is None]
    assert [r.data["resume"] for r in root] == ["approved"]
    (tool_end,) = of_type(second, "tool_exec_end")
    assert ex(tool_end).id == "r1"
    assert "disposition" not in tool_end.data
    assert text_of(tool_end.data["result"]) == f"refund of A-17 {CANARY}: approved {CANARY}"
    assert ancestors(second, ex(tool_end))[0].id.startswith("tools_")
    (reply,) = of_type(second, "model_exec_end")
    assert reply.data["message"].text == "Your refund is done."
    # The conversation, each message once over both runs: the resume repeats nothing.
    committed = [r.data["message"] for r in of_type(records, "message_end")]
    assert [type(m).__name__ for m in committed] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    assert committed[0] == UserMessage("Refund A-17")


def test_an_interrupt_pauses_the_graph_and_the_resume_runs_the_call_again(tmp_path: Path) -> None:
    """interrupt() in a tool: deferred, not failed; Command(resume=...) completes the thread."""
    path = tmp_path / "refund.jsonl"
    graph = refund_agent(ToolCallingFake(responses=refund_script()), InMemorySaver())
    thread: RunnableConfig = {"configurable": {"thread_id": "refund-1"}}
    captured = captured_spans()
    with Session.create(path, observers=[SpanBridge(captured.processor, file_uri=path)]) as s:
        requests: list[Any] = [{"messages": [("user", "Refund A-17")]}, Command(resume="approved")]
        for request in requests:
            with s.begin_run() as run:
                handler = LoopscribeCallbackHandler(run)
                state = graph.invoke(request, {**thread, "callbacks": [handler]})
                assert handler.errors == 0
    assert state["messages"][-1].content == "Your refund is done."
    assert_refund_resumed(list(loopscribe.read(path)))

    spans = captured.spans
    assert not [s for s in spans if s.status.status_code is StatusCode.ERROR]
    tools = [s for s in spans if s.name == "execute_tool refund"]
    assert [attrs(s)["gen_ai.tool.call.id"] for s in tools] == ["r1", "r1"]
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for span in tools:
        assert span.parent is not None
        assert by_id[span.parent.span_id].name.endswith("tools")
    assert span_body_free(spans)
    printed = show(path).splitlines()
    assert "?" not in printed
    assert "Your refund is done." in printed


RESUME_CHILD = """
import sqlite3, sys, warnings
from langchain_core.messages import AIMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from loopscribe import Session
from loopscribe.adapters.langchain import LoopscribeCallbackHandler
from tests.adapters.test_langgraph import ToolCallingFake
from tests.adapters.test_langgraph_scenarios import refund_agent

saver = SqliteSaver(sqlite3.connect(sys.argv[2], check_same_thread=False))
model = ToolCallingFake(responses=[AIMessage("Your refund is done.", id="ai-2")])
graph = refund_agent(model, saver)
with Session.open(sys.argv[1]) as session, session.begin_run() as run:
    handler = LoopscribeCallbackHandler(run)
    config = {"configurable": {"thread_id": "refund-2"}, "callbacks": [handler]}
    state = graph.invoke(Command(resume="approved"), config)
    assert handler.errors == 0, handler.errors
print(state["messages"][-1].content)
"""


def test_a_thread_paused_in_one_process_resumes_in_another(tmp_path: Path) -> None:
    """A SqliteSaver thread: a new process, a new recorder on the same file, nothing repeated."""
    path = tmp_path / "refund.jsonl"
    database = tmp_path / "threads.sqlite"
    connection = sqlite3.connect(database, check_same_thread=False)
    try:
        graph = refund_agent(ToolCallingFake(responses=refund_script()), SqliteSaver(connection))
        with Session.create(path) as session, session.begin_run() as run:
            handler = LoopscribeCallbackHandler(run)
            config: RunnableConfig = {
                "configurable": {"thread_id": "refund-2"},
                "callbacks": [handler],
            }
            paused = graph.invoke({"messages": [("user", "Refund A-17")]}, config)
        assert handler.errors == 0
        assert paused["__interrupt__"]
    finally:
        connection.close()
    done = subprocess.run(
        [sys.executable, "-c", RESUME_CHILD, str(path), str(database)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Your refund is done."
    assert_refund_resumed(list(loopscribe.read(path)))


class Work(TypedDict):
    """The map-reduce state: items in, one result per item out."""

    items: list[str]
    results: Annotated[list[str], operator.add]


def test_send_fan_out_and_parallel_branches_run_as_sibling_executions(tmp_path: Path) -> None:
    """Send maps a node over three items beside a parallel branch: each run once, in its place."""
    path = tmp_path / "fanout.jsonl"

    def plan(state: Work) -> dict[str, Any]:
        return {}

    def fan_out(state: Work) -> list[Send]:
        return [Send("work", {"items": [item], "results": []}) for item in state["items"]]

    def work(state: Work) -> dict[str, Any]:
        (item,) = state["items"]
        model = ToolCallingFake(responses=[AIMessage(f"summary of {item}", id=f"sum-{item}")])
        return {"results": [model.invoke(f"summarize {item}").content]}

    def audit(state: Work) -> dict[str, Any]:
        return {"results": ["audited"]}

    def reduce(state: Work) -> dict[str, Any]:
        return {}

    builder = StateGraph(Work)
    builder.add_node("plan", plan)
    builder.add_node("work", work)
    builder.add_node("audit", audit)
    builder.add_node("reduce", reduce)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["work"])
    builder.add_edge("plan", "audit")
    builder.add_edge(["work", "audit"], "reduce")
    builder.add_edge("reduce", END)
    graph: Any = builder.compile()

    captured = captured_spans()
    with (
        Session.create(path, observers=[SpanBridge(captured.processor, file_uri=path)]) as s,
        s.begin_run() as run,
    ):
        handler = LoopscribeCallbackHandler(run)
        out = graph.invoke({"items": ["x", "y", "z"], "results": []}, {"callbacks": [handler]})
    assert handler.errors == 0
    assert sorted(out["results"]) == ["audited", "summary of x", "summary of y", "summary of z"]
    records = list(loopscribe.read(path))
    assert_calls_once(records)
    nodes = [ex(r) for r in of_type(records, "agent_start") if ex(r).parent_id == "LangGraph_1"]
    assert sorted(n.id for n in nodes) == [
        *("audit_1", "plan_1", "reduce_1", "work_1", "work_2", "work_3")
    ]
    # Each branch's model call sits under its own branch, and its reply is committed once.
    replies = {
        r.data["message"].text: ancestors(records, ex(r))[0].id
        for r in of_type(records, "model_exec_end")
    }
    assert sorted(replies) == ["summary of x", "summary of y", "summary of z"]
    assert sorted(replies.values()) == ["work_1", "work_2", "work_3"]
    committed = [r.data["message"] for r in of_type(records, "message_end")]
    assert sorted(m.text for m in committed if isinstance(m, AssistantMessage)) == sorted(replies)
    # The reduce step starts after every branch ended.
    ends = {ex(r).id: r.seq for r in of_type(records, "agent_end")}
    (reduce_start,) = [r for r in of_type(records, "agent_start") if ex(r).id == "reduce_1"]
    assert reduce_start.seq > max(ends[n] for n in ("work_1", "work_2", "work_3", "audit_1"))

    spans = captured.spans
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 3
    parents = sorted(
        attrs(by_id[s.parent.span_id])["loopscribe.execution.id"] for s in chats if s.parent
    )
    assert parents == ["work_1", "work_2", "work_3"]


@pytest.mark.parametrize("nested", [False, True], ids=["graph", "sub-graph"])
def test_a_retry_policy_retries_the_node_as_attempts_of_one_execution(
    tmp_path: Path, nested: bool
) -> None:
    """RetryPolicy: failed attempts end with their error, the next follows retry_scheduled."""
    path = tmp_path / "retry.jsonl"
    attempts: list[int] = []

    def flaky(state: MessagesState) -> dict[str, Any]:
        attempts.append(len(attempts) + 1)
        model = ToolCallingFake(responses=[AIMessage(f"try {len(attempts)}")])
        reply = model.invoke(state["messages"])
        if len(attempts) < 3:
            raise ConnectionError(f"upstream reset {len(attempts)}")
        return {"messages": [reply]}

    def steady(state: MessagesState) -> dict[str, Any]:
        return {}

    builder = StateGraph(MessagesState)
    policy = RetryPolicy(
        max_attempts=3, initial_interval=0.001, jitter=False, retry_on=ConnectionError
    )
    builder.add_node("flaky", flaky, retry_policy=policy)
    builder.add_node("steady", steady, retry_policy=policy)
    builder.add_edge(START, "flaky")
    builder.add_edge(START, "steady")
    builder.add_edge(["flaky", "steady"], END)
    graph: Any = builder.compile()
    if nested:
        outer = StateGraph(MessagesState)
        outer.add_node("team", graph)
        outer.add_edge(START, "team")
        graph = outer.compile()

    captured = captured_spans()
    with (
        Session.create(path, observers=[SpanBridge(captured.processor, file_uri=path)]) as s,
        s.begin_run() as run,
    ):
        handler = LoopscribeCallbackHandler(run)
        out = graph.invoke({"messages": [("user", "go")]}, {"callbacks": [handler]})
    assert handler.errors == 0
    assert out["messages"][-1].content == "try 3"
    records = list(loopscribe.read(path))
    assert_calls_once(records)
    flaky_ends = [r for r in of_type(records, "agent_end") if ex(r).id == "flaky_1"]
    assert [ex(r).attempt for r in flaky_ends] == [1, 2, 3]
    assert [r.data.get("error", {}).get("message") for r in flaky_ends] == [
        *("upstream reset 1", "upstream reset 2", None)
    ]
    scheduled = of_type(records, "retry_scheduled")
    assert [(ex(r).id, ex(r).attempt, r.data["next_attempt"]) for r in scheduled] == [
        ("flaky_1", 1, 2),
        ("flaky_1", 2, 3),
    ]
    assert [ex(r).attempt for r in of_type(records, "agent_start") if ex(r).id == "steady_1"] == [1]
    # Each attempt's model call is under that attempt of the node.
    models = of_type(records, "model_exec_end")
    assert [ancestors(records, ex(r))[0].id for r in models] == ["flaky_1"] * 3

    nodes = [s for s in captured.spans if attrs(s).get("loopscribe.execution.id") == "flaky_1"]
    assert sorted((attrs(s)["loopscribe.attempt"], s.status.status_code) for s in nodes) == [
        (1, StatusCode.ERROR),
        (2, StatusCode.ERROR),
        (3, StatusCode.UNSET),
    ]
    assert {attrs(s).get("error.type") for s in nodes} == {"ConnectionError", None}


HUGE = "x" * 1_000_000


@tool
def get_alerts(city: str) -> str:
    """Weather alerts for a city."""
    raise ValueError(f"the alerts service is down for {city}")


@tool
def get_report(city: str) -> str:
    """The full weather report: very long, with odd characters."""
    return f"{city} \x00 \u2028 \U0001f326 {HUGE}"


@pytest.mark.parametrize("handled", [True, False])
def test_a_raising_tool_is_recorded_with_its_error(tmp_path: Path, handled: bool) -> None:
    """ToolNode(handle_tool_errors=...): the model sees the error, or the graph fails with it."""
    path = tmp_path / "alerts.jsonl"
    model = ToolCallingFake(
        responses=[
            AIMessage(
                "",
                tool_calls=[
                    call("get_report", "t1", city="Faro"),
                    call("get_alerts", "t2", city="Faro"),
                ],
            ),
            AIMessage("No alerts to report."),
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(
            model, ToolNode([get_report, get_alerts], handle_tool_errors=handled)
        )
    captured = captured_spans()
    with (
        Session.create(path, observers=[SpanBridge(captured.processor, file_uri=path)]) as s,
        s.begin_run() as run,
    ):
        handler = LoopscribeCallbackHandler(run)
        if handled:
            graph.invoke({"messages": [("user", "Alerts?")]}, {"callbacks": [handler]})
        else:
            with pytest.raises(ValueError, match="alerts service is down"):
                graph.invoke({"messages": [("user", "Alerts?")]}, {"callbacks": [handler]})
    assert handler.errors == 0
    records = list(loopscribe.read(path))
    assert_calls_once(records)
    ends = {ex(r).id: r.data for r in of_type(records, "tool_exec_end")}
    report = ends["t1"]["result"]
    assert isinstance(report, ToolResultMessage)
    assert text_of(report) == f"Faro \x00 \u2028 \U0001f326 {HUGE}"
    results = [r.data["message"] for r in of_type(records, "message_end")]
    results = [m for m in results if isinstance(m, ToolResultMessage)]
    status = {s.name: s.status.status_code for s in captured.spans}
    if handled:
        # ToolNode turned the error into a message for the model; the graph went on.
        assert ends["t2"]["is_error"] is True
        assert [m.tool_call_id for m in results if m.is_error] == ["t2"]
        assert len(of_type(records, "model_exec_start")) == 2
        assert status["invoke_agent LangGraph"] is StatusCode.UNSET
    else:
        assert ends["t2"]["error"] == {
            "type": "ValueError",
            "message": "the alerts service is down for Faro",
        }
        assert len(of_type(records, "model_exec_start")) == 1
        root_end = [r for r in of_type(records, "agent_end") if ex(r).parent_id is None]
        assert root_end[0].data["error"]["type"] == "ValueError"
        assert status["invoke_agent LangGraph"] is StatusCode.ERROR
    assert status["execute_tool get_alerts"] is StatusCode.ERROR
    assert status["execute_tool get_report"] is StatusCode.UNSET
    assert not any(HUGE[:100] in repr(attrs(s)) for s in captured.spans)


def test_astream_events_records_each_reply_once(tmp_path: Path) -> None:
    """astream_events(version="v2") with streamed tool calls: the same records as invoke."""
    graph = streamed_graph()
    path = tmp_path / "events.jsonl"
    thread: RunnableConfig = {"configurable": {"thread_id": "e"}}
    seen: list[str] = []

    async def converse(session: Session) -> None:
        for question in ("Weather?", "Tomorrow?"):
            with session.begin_run() as run:
                handler = LoopscribeCallbackHandler(run)
                async for event in graph.astream_events(
                    {"messages": [("user", question)]},
                    {**thread, "callbacks": [handler]},
                    version="v2",
                ):
                    seen.append(event["event"])
                assert handler.errors == 0

    with Session.create(path) as session:
        asyncio.run(converse(session))
    assert "on_chat_model_stream" in seen
    assert_streamed_run(path)


def test_a_fallback_model_answers_after_the_first_one_fails(tmp_path: Path) -> None:
    """with_fallbacks: both calls nest under the fallback chain; only the answer is committed."""
    path = tmp_path / "fallback.jsonl"

    def models() -> Any:
        primary = ScriptedChatModel(model_name="primary", script=[RateLimitError("429")])
        backup = ScriptedChatModel(model_name="backup", script=[AIMessage("From the backup.")])
        return primary.with_fallbacks([backup])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [models().invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph: Any = builder.compile()
    captured = captured_spans()
    with Session.create(path, observers=[SpanBridge(captured.processor, file_uri=path)]) as s:
        with s.begin_run() as run:
            handler = LoopscribeCallbackHandler(run)
            graph.invoke({"messages": [("user", "Hello?")]}, {"callbacks": [handler]})
            assert handler.errors == 0
        with s.begin_run() as run:
            handler = LoopscribeCallbackHandler(run)
            asyncio.run(models().ainvoke("Hello again?", {"callbacks": [handler]}))
            assert handler.errors == 0
    in_graph, alone = by_run(list(loopscribe.read(path)))
    for records, chain in (
        (in_graph, "RunnableWithFallbacks_1"),
        (alone, "RunnableWithFallbacks_1"),
    ):
        assert_calls_once(records)
        starts = of_type(records, "model_exec_start")
        assert [r.data["model"] for r in starts] == ["primary", "backup"]
        assert {ex(r).parent_id for r in starts} == {chain}
        failed, answered = of_type(records, "model_exec_end")
        assert failed.data["error"]["type"] == "RateLimitError"
        assert answered.data["message"].text == "From the backup."
        assistant = [
            r.data["message"]
            for r in of_type(records, "message_end")
            if isinstance(r.data["message"], AssistantMessage)
        ]
        assert [m.text for m in assistant] == ["From the backup."]
    chain_of = [
        ex(r).parent_id for r in of_type(in_graph, "agent_start") if ex(r).id.startswith("Runnable")
    ]
    assert chain_of == ["agent_1"]
    spans = captured.spans
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for name, code in (("chat primary", StatusCode.ERROR), ("chat backup", StatusCode.UNSET)):
        found = [s for s in spans if s.name == name]
        assert [s.status.status_code for s in found] == [code, code]
        parents = {
            attrs(by_id[s.parent.span_id])["loopscribe.execution.id"] for s in found if s.parent
        }
        assert parents == {"RunnableWithFallbacks_1"}


class Handoff(TypedDict):
    """A state a sub-graph hands back to its parent."""

    answer: str


def test_a_handoff_to_the_parent_graph_is_not_a_failure(tmp_path: Path) -> None:
    """Command(graph=Command.PARENT) from a sub-graph node: the steps stop, nothing fails."""

    def hand_back(state: Handoff) -> Command[Any]:
        return Command(graph=Command.PARENT, goto="finish", update={"answer": "handed"})

    def finish(state: Handoff) -> dict[str, Any]:
        return {"answer": state["answer"] + " and finished"}

    inner = StateGraph(Handoff)
    inner.add_node("hand_back", hand_back)
    inner.add_edge(START, "hand_back")
    outer = StateGraph(Handoff)
    outer.add_node("expert", inner.compile(name="expert"), destinations=("finish",))
    outer.add_node("finish", finish)
    outer.add_edge(START, "expert")
    graph: Any = outer.compile()
    path = tmp_path / "handoff.jsonl"
    captured = captured_spans()
    with (
        Session.create(path, observers=[SpanBridge(captured.processor, file_uri=path)]) as s,
        s.begin_run() as run,
    ):
        handler = LoopscribeCallbackHandler(run)
        out = graph.invoke({"answer": ""}, {"callbacks": [handler]})
    assert handler.errors == 0
    assert out["answer"] == "handed and finished"
    records = list(loopscribe.read(path))
    stopped = {ex(r).id: r.data.get("stop_reason") for r in of_type(records, "agent_end")}
    assert stopped["hand_back_1"] == "parent_command"
    assert stopped["finish_1"] is None
    assert not [r for r in records if "error" in r.data]
    assert not [s for s in captured.spans if s.status.status_code is StatusCode.ERROR]

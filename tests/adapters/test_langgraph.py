"""LangGraph agents recorded through the LangChain callback handler.

The graphs are LangGraph's own ``create_react_agent`` with an
``InMemorySaver`` checkpointer, driven by LangChain's fake chat model
(``FakeMessagesListChatModel``, taught to accept tools). Each test reads the
file back and checks what a user relies on: every model and tool call once,
nested where it ran, every committed message once, and ``loopscribe show``
rendering every message.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolCall
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, create_react_agent

import loopscribe
from loopscribe import (
    AssistantMessage,
    Execution,
    FileContent,
    Record,
    Session,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from loopscribe.adapters.langchain import LoopscribeCallbackHandler, LoopscribeCheckpointer
from loopscribe.live import Bus, Transient


class ToolCallingFake(FakeMessagesListChatModel):
    """LangChain's scripted fake chat model, accepting tools like a real one."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFake:
        """Tools change nothing: the script decides the replies."""
        return self


class StreamingFake(ToolCallingFake):
    """The same fake, streaming each reply word by word, tool calls as chunks."""

    def _chunks(self) -> Iterator[ChatGenerationChunk]:
        reply = self.responses[self.i]
        self.i = (self.i + 1) % len(self.responses)
        assert isinstance(reply, AIMessage)
        words = str(reply.content).split(" ") if reply.content else []
        for n, word in enumerate(words):
            text = word if n == 0 else " " + word
            yield ChatGenerationChunk(message=AIMessageChunk(content=text, id=reply.id))
        chunks = [
            {"name": c["name"], "args": str(c["args"]).replace("'", '"'), "id": c["id"], "index": n}
            for n, c in enumerate(reply.tool_calls)
        ]
        yield ChatGenerationChunk(
            message=AIMessageChunk(content="", tool_call_chunks=chunks, chunk_position="last")  # type: ignore[arg-type]
        )

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks():
            if run_manager is not None:
                run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks():
            if run_manager is not None:
                await run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
            yield chunk


def call(name: str, call_id: str, **args: Any) -> ToolCall:
    """A tool call as a model asks for it."""
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
def get_alerts(city: str) -> str:
    """Weather alerts for a city."""
    raise ValueError("the alerts service is down")


class Manuals(BaseRetriever):
    """A retriever over two fixed documents."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [
            Document("Umbrellas open upwards.", metadata={"source": "file:///docs/umbrella.md"}),
            Document(f"No document about {query}.", id="fallback"),
        ]


def react_agent(model: ToolCallingFake, tools: Sequence[BaseTool], **kwargs: Any) -> Any:
    """LangGraph's prebuilt ReAct agent (deprecated for langchain.agents, still shipped)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LangGraphDeprecatedSinceV10: the import moved
        graph = create_react_agent(model, ToolNode(tools, handle_tool_errors=True), **kwargs)
    assert isinstance(graph, CompiledStateGraph)
    return graph


def weather_script() -> list[BaseMessage]:
    """Two parallel calls, a failing call, an answer; then the second run's answer."""
    return [
        AIMessage(
            "",
            tool_calls=[
                call("get_weather", "c1", city="Lisbon"),
                call("get_weather", "c2", city="Porto"),
            ],
        ),
        AIMessage("", tool_calls=[call("get_alerts", "c3", city="Lisbon")]),
        AIMessage("Sunny in both, no alerts."),
        AIMessage("Tomorrow too."),
    ]


def of_type(records: Sequence[Record], kind: str) -> list[Record]:
    """The records of one type, in file order."""
    return [r for r in records if r.type == kind]


def ex(record: Record) -> Execution:
    """The record's execution, which these records have."""
    assert record.execution is not None
    return record.execution


def ancestors(records: Sequence[Record], execution: Execution) -> list[Execution]:
    """The executions above ``execution``, nearest first."""
    by_id = {ex(r).id: ex(r) for r in records if r.execution is not None}
    chain, parent = [], execution.parent_id
    while parent is not None:
        chain.append(by_id[parent])
        parent = by_id[parent].parent_id
    return chain


def assert_calls_once(records: Sequence[Record]) -> None:
    """Every model and tool execution starts once and ends once."""
    for start, end in (
        ("model_exec_start", "model_exec_end"),
        ("tool_exec_start", "tool_exec_end"),
    ):
        starts = Counter((ex(r).id, ex(r).attempt) for r in of_type(records, start))
        ends = Counter((ex(r).id, ex(r).attempt) for r in of_type(records, end))
        assert starts == ends
        assert set(starts.values()) <= {1}


def show(path: Path) -> str:
    """What ``loopscribe show`` prints for the file."""
    done = subprocess.run(
        [sys.executable, "-m", "loopscribe", "show", str(path), "--last", "100"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_a_checkpointed_thread_commits_each_message_once(tmp_path: Path) -> None:
    """Two runs on one thread_id: the second commits its own messages, never the history."""
    graph = react_agent(
        ToolCallingFake(responses=weather_script()),
        [get_weather, get_alerts],
        prompt="You are a weather bot.",
        checkpointer=InMemorySaver(),
    )
    path = tmp_path / "thread.jsonl"
    thread: RunnableConfig = {"configurable": {"thread_id": "t-1"}}
    handlers = []
    with Session.create(path) as session:
        for question in ("Weather in Lisbon and Porto?", "And tomorrow?"):
            with session.begin_run() as run:
                handler = LoopscribeCallbackHandler(run)
                handlers.append(handler)
                state = graph.invoke(
                    {"messages": [("user", question)]}, {**thread, "callbacks": [handler]}
                )
    assert [h.errors for h in handlers] == [0, 0]
    records = list(loopscribe.read(path))
    assert_calls_once(records)
    assert len(of_type(records, "model_exec_start")) == 4
    tools = [ex(r) for r in of_type(records, "tool_exec_start")]
    assert sorted(t.id for t in tools) == ["c1", "c2", "c3"]
    (alerts,) = [r for r in of_type(records, "tool_exec_end") if ex(r).id == "c3"]
    assert alerts.data["error"]["type"] == "ValueError"

    # The conversation: the thread's nine messages and the prompt, each once.
    committed = [r.data["message"] for r in of_type(records, "message_end")]
    assert len(state["messages"]) == 9
    assert [type(m).__name__ for m in committed] == [
        "UserMessage",
        "SystemMessage",
        "AssistantMessage",
        *("ToolResultMessage", "ToolResultMessage"),
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
        "UserMessage",
        "AssistantMessage",
    ]
    results = [m for m in committed if isinstance(m, ToolResultMessage)]
    assert sorted(m.tool_call_id for m in results) == ["c1", "c2", "c3"]
    (failed,) = [m for m in results if m.tool_call_id == "c3"]
    assert failed.is_error  # the error message ToolNode made for the raising tool
    assert committed[-2] == UserMessage("And tomorrow?")
    assert isinstance(committed[1], SystemMessage)

    # The thread id is kept; nodes are named executions, never UUIDs.
    roots = [r for r in of_type(records, "agent_start") if ex(r).parent_id is None]
    assert [r.data["thread_id"] for r in roots] == ["t-1", "t-1"]
    assert [ex(r).id for r in roots] == ["LangGraph_1", "LangGraph_1"]
    for start in of_type(records, "model_exec_start"):
        names = [a.id for a in ancestors(records, ex(start))]
        assert names[-1] == "LangGraph_1"
        assert names[-2].startswith("agent_")
    for tool_ex in tools:
        (node, root) = ancestors(records, tool_ex)
        assert node.id.startswith("tools_")
        assert root.id == "LangGraph_1"

    printed = show(path)
    assert "?" not in printed.splitlines()
    assert "the alerts service is down" in printed


def test_a_sub_graph_inside_a_tool_nests_under_the_call_with_its_own_messages(
    tmp_path: Path,
) -> None:
    """A graph run by a tool is an agent under that tool call; its messages stay its own."""
    expert = react_agent(
        ToolCallingFake(
            responses=[
                AIMessage("", tool_calls=[call("get_weather", "e1", city="Faro")]),
                AIMessage("Faro is sunny."),
            ]
        ),
        [get_weather],
        name="expert",
    )

    @tool
    def ask_expert(question: str) -> str:
        """Ask the weather expert."""
        answer = expert.invoke({"messages": [("user", question)]})
        return str(answer["messages"][-1].content)

    graph = react_agent(
        ToolCallingFake(
            responses=[
                AIMessage("", tool_calls=[call("ask_expert", "o1", question="Faro?")]),
                AIMessage("The expert says Faro is sunny."),
            ]
        ),
        [ask_expert],
    )
    path = tmp_path / "subgraph.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        graph.invoke({"messages": [("user", "Ask about Faro")]}, {"callbacks": [handler]})
    assert handler.errors == 0
    records = list(loopscribe.read(path))
    assert_calls_once(records)
    (inner,) = [r for r in of_type(records, "agent_start") if r.data["agent"] == "expert"]
    assert ex(inner).kind == "agent"
    assert ex(inner).parent_id == "o1"  # the tool call that ran it
    tools = {ex(r).id: ex(r) for r in of_type(records, "tool_exec_start")}
    assert ex(inner) in ancestors(records, tools["e1"])
    models = [ex(r) for r in of_type(records, "model_exec_start")]
    assert sum(ex(inner) in ancestors(records, m) for m in models) == 2

    outer_messages = [
        r
        for r in of_type(records, "message_end")
        if r.execution is None or ex(inner) not in [ex(r), *ancestors(records, ex(r))]
    ]
    inner_messages = [r for r in of_type(records, "message_end") if r not in outer_messages]
    assert [type(r.data["message"]).__name__ for r in inner_messages] == [
        *("UserMessage", "AssistantMessage", "ToolResultMessage", "AssistantMessage")
    ]
    assert inner_messages[0].data["message"] == UserMessage("Faro?")
    assert [type(r.data["message"]).__name__ for r in outer_messages] == [
        *("UserMessage", "AssistantMessage", "ToolResultMessage", "AssistantMessage")
    ]
    assert "?" not in show(path).splitlines()


def test_retriever_calls_are_datastore_tool_calls(tmp_path: Path) -> None:
    """A retriever used in a tool: its query, documents and their sources are recorded."""
    manuals = Manuals()

    @tool
    def search_manuals(query: str) -> str:
        """Search the manuals."""
        return "\n".join(d.page_content for d in manuals.invoke(query))

    graph = react_agent(
        ToolCallingFake(
            responses=[
                AIMessage("", tool_calls=[call("search_manuals", "s1", query="umbrella")]),
                AIMessage("Open it upwards."),
            ]
        ),
        [search_manuals],
    )
    path = tmp_path / "retriever.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        graph.invoke({"messages": [("user", "Umbrella?")]}, {"callbacks": [handler]})
    assert handler.errors == 0
    records = list(loopscribe.read(path))
    assert_calls_once(records)
    (start,) = [r for r in of_type(records, "tool_exec_start") if r.data["tool"] == "Manuals"]
    assert start.data["tool_type"] == "datastore"
    assert start.data["args"] == {"query": "umbrella"}
    assert ex(start).id == "Manuals_1"
    assert ex(start).parent_id == "s1"
    (end,) = [r for r in of_type(records, "tool_exec_end") if ex(r) == ex(start)]
    assert [d["page_content"] for d in end.data["result"]] == [
        "Umbrellas open upwards.",
        "No document about umbrella.",
    ]
    assert end.data["content"][0] == FileContent(
        uri="file:///docs/umbrella.md", modality="document"
    )


def streamed_graph() -> Any:
    """A checkpointed ReAct agent whose model streams."""
    return react_agent(
        StreamingFake(responses=weather_script()),
        [get_weather, get_alerts],
        checkpointer=InMemorySaver(),
    )


def assert_streamed_run(path: Path) -> None:
    """What a streamed two-run thread leaves in the file."""
    records = list(loopscribe.read(path))
    assert_calls_once(records)
    assert len(of_type(records, "model_exec_start")) == 4
    assert "message_update" not in {r.type for r in records}
    replies = [r.data["message"] for r in of_type(records, "model_exec_end")]
    assert [[c.id for c in m.tool_calls] for m in replies] == [["c1", "c2"], ["c3"], [], []]
    assert replies[2].text == "Sunny in both, no alerts."
    committed = [r.data["message"] for r in of_type(records, "message_end")]
    assert len(committed) == 9
    assert sum(isinstance(m, AssistantMessage) for m in committed) == 4
    assert "?" not in show(path).splitlines()


def test_a_streamed_graph_records_each_reply_once(tmp_path: Path) -> None:
    """graph.stream(stream_mode="messages"): whole replies once each; tokens go live only."""
    graph = streamed_graph()
    path = tmp_path / "stream.jsonl"
    thread: RunnableConfig = {"configurable": {"thread_id": "s"}}
    bus = Bus()
    with Session.create(path, observers=[bus]) as session:
        subscription = bus.subscribe(session.id)
        for question in ("Weather?", "Tomorrow?"):
            with session.begin_run() as run:
                handler = LoopscribeCallbackHandler(run)
                tokens = [
                    chunk
                    for chunk, _ in graph.stream(
                        {"messages": [("user", question)]},
                        {**thread, "callbacks": [handler]},
                        stream_mode="messages",
                    )
                ]
                assert tokens
                assert handler.errors == 0
    assert_streamed_run(path)
    subscription.close()
    deltas = [item for item in subscription if isinstance(item, Transient)]
    assert {d.type for d in deltas} == {"message_update"}
    texts: dict[str, str] = {}
    tool_calls: list[str] = []
    for d in deltas:
        assert d.execution is not None
        assert d.execution.kind == "model"
        delta = d.data["delta"]
        if isinstance(delta, str):
            texts[d.execution.id] = texts.get(d.execution.id, "") + delta
        else:
            assert delta["type"] == "tool_call"
            tool_calls.append(delta["id"])
    replies = [r for r in loopscribe.read(path) if r.type == "model_exec_end"]
    assert tool_calls == ["c1", "c2", "c3"]
    for reply in replies:
        assert reply.execution is not None
        assert texts.get(reply.execution.id, "") == reply.data["message"].text


def test_an_async_streamed_graph_records_the_same(tmp_path: Path) -> None:
    """graph.astream on the event loop records what the sync stream records."""
    graph = streamed_graph()
    path = tmp_path / "astream.jsonl"
    thread: RunnableConfig = {"configurable": {"thread_id": "a"}}

    async def converse(session: Session) -> None:
        for question in ("Weather?", "Tomorrow?"):
            with session.begin_run() as run:
                handler = LoopscribeCallbackHandler(run)
                async for _ in graph.astream(
                    {"messages": [("user", question)]},
                    {**thread, "callbacks": [handler]},
                    stream_mode="messages",
                ):
                    pass
                assert handler.errors == 0

    with Session.create(path) as session:
        asyncio.run(converse(session))
    assert_streamed_run(path)


def test_each_committed_checkpoint_is_referenced_and_resumes_the_graph(tmp_path: Path) -> None:
    """LoopscribeCheckpointer: one checkpoint record per saved super-step, a reference only."""
    path = tmp_path / "thread.jsonl"
    thread: RunnableConfig = {"configurable": {"thread_id": "t-9"}}
    with Session.create(path) as session:
        saver = LoopscribeCheckpointer(InMemorySaver(), session)
        graph = react_agent(
            ToolCallingFake(responses=weather_script()),
            [get_weather, get_alerts],
            checkpointer=saver,
        )
        for question in ("Weather in Lisbon and Porto?", "And tomorrow?"):
            with session.begin_run() as run:
                handler = LoopscribeCallbackHandler(run)
                graph.invoke({"messages": [("user", question)]}, {**thread, "callbacks": [handler]})
                assert handler.errors == 0
        # Between runs no run is open: a checkpoint then is stored but not referenced.
        graph.update_state(thread, {"messages": [("user", "a note")]})
    assert saver.errors == 0
    stored = [t.config["configurable"]["checkpoint_id"] for t in saver.list(thread)]
    records = list(loopscribe.read(path))
    checkpoints = of_type(records, "checkpoint")
    snapshots = [r.data["snapshot"] for r in checkpoints]
    assert [s["checkpoint_id"] for s in snapshots] == list(reversed(stored))[:-1]
    assert {s["thread_id"] for s in snapshots} == {"t-9"}
    assert [s["step"] for s in snapshots] == sorted(s["step"] for s in snapshots)
    assert snapshots[0]["source"] == "input"
    for snapshot in snapshots:
        assert set(snapshot) <= {
            "framework",
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "step",
            "source",
        }
    # Each reference follows the records of its super-step: the last one of a run
    # comes after that run's final model reply.
    runs = {r.run_id for r in checkpoints}
    assert len(runs) == 2
    for run_id in runs:
        last_reply = max(
            r.seq for r in records if r.run_id == run_id and r.type == "model_exec_end"
        )
        last_checkpoint = max(r.seq for r in checkpoints if r.run_id == run_id)
        assert last_checkpoint > last_reply
    # The reference is what LangGraph needs to load that state again.
    resumed = graph.get_state({"configurable": {"thread_id": "t-9", **_ids(snapshots[-1])}})
    assert resumed.values["messages"][-1].content == "Tomorrow too."


def _ids(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The configurable keys a checkpoint reference gives back to LangGraph."""
    return {k: snapshot[k] for k in ("checkpoint_ns", "checkpoint_id") if k in snapshot}


def test_an_async_graph_references_its_checkpoints_too(tmp_path: Path) -> None:
    """ainvoke stores through aput: the same references as a sync run."""
    path = tmp_path / "async.jsonl"
    thread: RunnableConfig = {"configurable": {"thread_id": "t-a"}}
    with Session.create(path) as session, session.begin_run() as run:
        saver = LoopscribeCheckpointer(InMemorySaver(), run)
        graph = react_agent(
            ToolCallingFake(responses=weather_script()),
            [get_weather, get_alerts],
            checkpointer=saver,
        )
        asyncio.run(graph.ainvoke({"messages": [("user", "Weather?")]}, thread))
    stored = [t.config["configurable"]["checkpoint_id"] for t in saver.list(thread)]
    snapshots = [r.data["snapshot"] for r in of_type(list(loopscribe.read(path)), "checkpoint")]
    assert [s["checkpoint_id"] for s in snapshots] == list(reversed(stored))


CRASH_CHILD = """
import sys, time, warnings
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode, create_react_agent
from loopscribe import Session
from loopscribe.adapters.langchain import LoopscribeCallbackHandler, LoopscribeCheckpointer

class Fake(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):
        return self

@tool
def wait() -> str:
    '''Block until killed.'''
    print("ready", flush=True)
    time.sleep(60)
    return "never"

call = {"name": "wait", "args": {}, "id": "w1", "type": "tool_call"}
session = Session.create(sys.argv[1])
saver = LoopscribeCheckpointer(InMemorySaver(), session)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    graph = create_react_agent(
        Fake(responses=[AIMessage("", tool_calls=[call])]), ToolNode([wait]), checkpointer=saver
    )
run = session.begin_run()
graph.invoke(
    {"messages": [("user", "wait")]},
    {"configurable": {"thread_id": "crash"}, "callbacks": [LoopscribeCallbackHandler(run)]},
    durability="sync",
)
"""


def test_checkpoint_references_survive_a_sigkill_mid_graph(tmp_path: Path) -> None:
    """SIGKILL while a tool runs: with sync durability every earlier step is referenced."""
    path = tmp_path / "crash.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", CRASH_CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    records = list(loopscribe.read(path))
    snapshots = [r.data["snapshot"] for r in of_type(records, "checkpoint")]
    # The input, the start and the model's step were committed before the tool started.
    assert [s["step"] for s in snapshots] == [-1, 0, 1]
    assert {s["thread_id"] for s in snapshots} == {"crash"}
    assert "run_close" not in {r.type for r in records}
    with Session.open(path) as session:
        assert session.load_checkpoint() == snapshots[-1]
    (tool_start,) = of_type(records, "tool_exec_start")
    assert ex(tool_start).id == "w1"
    assert max(r.seq for r in of_type(records, "checkpoint")) < tool_start.seq

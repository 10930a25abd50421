"""MCP through loopscribe.instrument: a real server in process, and over stdio killed mid-call."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientSession
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import Session, instrument
from loopscribe.otel import SpanBridge

from .conftest import of
from .mcp_server import server as calc

SERVER = Path(__file__).with_name("mcp_server.py")


@pytest.fixture(autouse=True)
def patched() -> Iterator[instrument.Instrumentation]:
    handle = instrument.mcp()
    yield handle
    handle.uninstrument()


def test_a_tool_call_in_process_is_recorded_on_both_sides(tmp_path: Path) -> None:
    """Client and server side each record the call: arguments, content, isError; mcp.* on spans."""
    exporter = InMemorySpanExporter()
    bridge = SpanBridge(SimpleSpanProcessor(exporter))

    async def main() -> None:
        async with Client(calc) as client:
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == {"add", "fail", "hang"}
            assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {
                "result": 5
            }
            failed = await client.call_tool("fail", {"reason": "no"})
            assert failed.is_error

    with (
        Session.create(tmp_path / "s.jsonl", observers=[bridge]) as session,
        session.begin_run(),
    ):
        asyncio.run(main())
    starts = of(session, "tool_exec_start")
    client_side = [r for r in starts if r.data["mcp"].get("side") != "server"]
    server_side = [r for r in starts if r.data["mcp"].get("side") == "server"]
    assert [(r.data["tool"], r.data["args"]) for r in client_side] == [
        ("add", {"a": 2, "b": 3}),
        ("fail", {"reason": "no"}),
    ]
    assert client_side[0].data["mcp"]["server"] == "calc"
    assert client_side[0].data["mcp"]["protocol_version"]
    assert [r.data["tool"] for r in server_side] == ["add", "fail"]
    ends = {
        (r.data["tool"], r.data["mcp"].get("side")): r.data for r in of(session, "tool_exec_end")
    }
    assert ends[("add", None)]["result"] == [{"type": "text", "text": "5"}]
    assert ends[("add", None)]["details"] == {"result": 5}
    assert ends[("fail", None)]["is_error"] is True
    assert "Error executing tool fail" in str(ends[("fail", None)]["result"])
    assert ends[("fail", "server")]["error"]["type"] == "UnexpectedToolError"
    tool_spans = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    versions = {(s.attributes or {}).get("mcp.protocol.version") for s in tool_spans}
    assert versions == {client_side[0].data["mcp"]["protocol_version"], None}  # None: server side
    assert len(tool_spans) == 4
    for span in tool_spans:
        attributes = dict(span.attributes or {})
        assert attributes["mcp.method.name"] == "tools/call"
        assert attributes["gen_ai.tool.name"] in ("add", "fail")
        assert '"a"' not in str(attributes)


def test_a_server_killed_mid_call_ends_the_execution_with_the_error(tmp_path: Path) -> None:
    """SIGKILL to the stdio server while a call runs: the call raises, its execution ends."""
    marker = tmp_path / "pid"
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])

    async def main() -> None:
        async with Client(params) as client:
            call = asyncio.create_task(client.call_tool("hang", {"marker": str(marker)}))
            while not marker.exists() or not marker.read_text():
                await asyncio.sleep(0.02)
            os.kill(int(marker.read_text()), signal.SIGKILL)
            with pytest.raises(BaseException) as caught:  # noqa: PT011 - any way the SDK reports it
                await asyncio.wait_for(call, 20)
            assert not isinstance(caught.value, TimeoutError)

    with Session.create(tmp_path / "s.jsonl") as session, session.begin_run():
        try:
            asyncio.run(main())
        except* ConnectionError:  # the client's exit may report the dead server too
            pass
    (end,) = of(session, "tool_exec_end")
    assert end.data["tool"] == "hang"
    assert end.data["error"]["type"] in {"MCPError", "ClosedResourceError", "ConnectionError"}


def test_a_cancelled_call_ends_its_execution(tmp_path: Path) -> None:
    """Cancelling the calling task ends the execution with CancelledError."""
    marker = tmp_path / "pid"
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])

    async def main() -> None:
        async with Client(params) as client:
            call = asyncio.create_task(client.call_tool("hang", {"marker": str(marker)}))
            while not marker.exists() or not marker.read_text():
                await asyncio.sleep(0.02)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            os.kill(int(marker.read_text()), signal.SIGKILL)

    with Session.create(tmp_path / "s.jsonl") as session, session.begin_run():
        try:
            asyncio.run(main())
        except* ConnectionError:  # the client's exit may report the dead server too
            pass
    (end,) = of(session, "tool_exec_end")
    assert end.data["error"]["type"] == "CancelledError"


def test_uninstrument_restores_the_client_session() -> None:
    """After uninstrument() ClientSession.call_tool is the SDK's own."""
    instrument.mcp().uninstrument()
    assert not hasattr(ClientSession.call_tool, "__wrapped__")


def test_listed_tools_are_named_in_the_next_model_request(tmp_path: Path) -> None:
    """list_tools, then a model call declaring ``add``: its request names the server of ``add``."""
    import httpx2
    import openai

    from .conftest import Server
    from .test_openai import CHAT

    server = Server()
    server.reply(200, json=CHAT)
    model = openai.AsyncOpenAI(
        api_key="sk-x",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(server.handle_async)),
    )

    async def main() -> None:
        async with Client(calc) as client:
            listed = await client.list_tools()
            tools: Any = [
                {"type": "function", "function": {"name": t.name, "parameters": t.input_schema}}
                for t in listed.tools
                if t.name == "add"
            ]
            await model.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "2+3?"}], tools=tools
            )

    with (
        instrument.openai(),
        Session.create(tmp_path / "s.jsonl") as session,
        session.begin_run(),
    ):
        asyncio.run(main())
    (request,) = of(session, "model_request")
    assert request.data["mcp_tools"] == {"add": "calc"}

"""GenAI metrics of a real pydantic-ai agent run, through its adapter and a live bridge."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loopscribe import Session, read
from loopscribe.adapters.pydantic_ai import LoopscribeCapability
from loopscribe.otel import SpanBridge, span_id, trace_id
from loopscribe.testing import captured_spans


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    """Only the in-process function model answers."""
    with override_allow_model_requests(False):
        yield


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call the tool once, then answer."""
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("lookup", {"key": 2}, tool_call_id="c1")])
    return ModelResponse(parts=[TextPart("found it")])


def test_an_adapter_run_s_metrics_equal_its_records(tmp_path: Path) -> None:
    """Token sums equal the recorded usage, one duration per call and tool, exemplars name them."""
    agent = Agent(FunctionModel(reply, model_name="scripted-1"), name="finder")

    @agent.tool_plain
    def lookup(key: int) -> str:
        """Look a key up."""
        return f"value {key}"

    reader = InMemoryMetricReader()
    path = tmp_path / "s.jsonl"
    bridge = SpanBridge(
        captured_spans().processor, file_uri=path, metrics=MeterProvider(metric_readers=[reader])
    )
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        asyncio.run(agent.run("find key 2", capabilities=[LoopscribeCapability(run)]))
    records = list(read(path))
    ends = [r for r in records if r.type == "model_exec_end"]
    used_in = sum(r.data["usage"].input_tokens for r in ends)
    used_out = sum(r.data["usage"].output_tokens for r in ends)
    data = reader.get_metrics_data()
    assert data is not None
    metrics: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                metrics.setdefault(m.name, []).extend(m.data.data_points)
    tokens = {
        str(p.attributes["gen_ai.token.type"]): p for p in metrics["gen_ai.client.token.usage"]
    }
    assert (tokens["input"].sum, tokens["output"].sum) == (used_in, used_out)
    assert used_in > 0
    (duration,) = metrics["gen_ai.client.operation.duration"]
    assert duration.count == len(ends) == 2
    assert duration.attributes["gen_ai.request.model"] == "scripted-1"
    (tool,) = metrics["gen_ai.execute_tool.duration"]
    assert tool.count == 1
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    run_id = next(r.run_id for r in records if r.run_id)
    calls = {
        span_id(session.id, run_id, r.execution.id, r.execution.attempt)
        for r in ends
        if r.execution is not None
    }
    assert {e.span_id for e in duration.exemplars} <= calls
    assert {e.trace_id for e in duration.exemplars} == {trace_id(session.id, run_id)}

"""Record an OpenAI Agents SDK run with loopscribe and export its spans.

Runs offline: the models are the SDK's ``ScriptedModel`` playing a script,
each step with the token usage a provider would report for it.
The SDK's own tracing stays on (loopscribe does not need it off; without
``OPENAI_API_KEY`` it exports nothing). The agent asks, in one turn, for a
tool that fails and for a forecaster agent used as a tool (whose own model
and tool calls are recorded under that call), then answers; an input
guardrail checks the question. Spans go to ``$OTEL_EXPORTER_OTLP_ENDPOINT``
if it is set, otherwise to an OTLP JSON file beside the session.

    python examples/openai_agents_agent.py [DIR]
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    TResponseInputItem,
    function_tool,
    input_guardrail,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

from loopscribe import Session, read
from loopscribe.adapters.openai_agents import LoopscribeHooks
from loopscribe.otel import SpanBridge, default_export_path, default_processor


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"21C and sunny in {city}"


@function_tool
def get_alerts(region: str) -> str:
    """Weather alerts for a region."""
    raise RuntimeError(f"alert feed for {region} is down")


@input_guardrail
def on_topic(
    ctx: RunContextWrapper[Any], agent: Agent[Any], question: str | list[TResponseInputItem]
) -> GuardrailFunctionOutput:
    """Let weather questions through."""
    return GuardrailFunctionOutput(output_info={"topic": "weather"}, tripwire_triggered=False)


def usage(input_tokens: int, output_tokens: int) -> Usage:
    """Token usage as a provider reports it with each response."""
    return Usage(
        requests=1,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


FORECASTER = Agent(
    name="forecaster",
    instructions="Look the weather up.",
    model=ScriptedModel(
        [
            ModelStep(
                output=[function_call("get_weather", {"city": "Lisbon"}, call_id="call_f1")],
                usage=usage(61, 18),
            ),
            ModelStep(output=[assistant_message("21C and sunny in Lisbon.")], usage=usage(94, 9)),
        ]
    ),
    tools=[get_weather],
)

AGENT = Agent(
    name="weather-bot",
    instructions="Answer weather questions with the tools.",
    model=ScriptedModel(
        [
            ModelStep(
                output=[
                    function_call("forecast", {"input": "Lisbon today"}, call_id="call_1"),
                    function_call("get_alerts", {"region": "Lisbon"}, call_id="call_2"),
                ],
                usage=usage(112, 41),
            ),
            ModelStep(
                output=[
                    assistant_message("It is 21C and sunny in Lisbon; no alert feed right now.")
                ],
                usage=usage(187, 16),
            ),
        ]
    ),
    tools=[
        FORECASTER.as_tool(tool_name="forecast", tool_description="Ask the forecaster."),
        get_alerts,
    ],
    input_guardrails=[on_topic],
)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-sessions")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"openai-agents-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}.jsonl"

    processor = default_processor(path)
    bridge = SpanBridge(processor, file_uri=path)
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        result = asyncio.run(LoopscribeHooks(run).run(AGENT, "Weather in Lisbon?"))
    processor.shutdown()

    print(f"answer: {result.final_output}")
    print(f"session {session.id} recorded to {path} ({len(list(read(path)))} records)")
    print(f"spans: {bridge.spans_emitted} (without an OTLP endpoint: {default_export_path(path)})")


if __name__ == "__main__":
    main()

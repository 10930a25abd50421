"""Record a LangChain tool-calling agent with loopscribe and export its spans.

Runs offline: the chat model is LangChain's ``GenericFakeChatModel`` playing
a script; like a provider's chat model it names its provider and reports
token usage (``usage_metadata``) on every reply. The agent asks for two
tools, one of which fails, then answers.
Spans go to ``$OTEL_EXPORTER_OTLP_ENDPOINT`` if it is set, otherwise to an
OTLP JSON file beside the session. LangSmith tracing stays off unless
``LANGSMITH_TRACING=true`` is set.

    python examples/langchain_agent.py [DIR]
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool

from loopscribe import Session, read
from loopscribe.adapters.langchain import LoopscribeCallbackHandler
from loopscribe.otel import SpanBridge, default_export_path, default_processor


def count_tokens(text: str) -> int:
    """A rough token count (one per word or punctuation run), as a stand-in tokenizer."""
    return len(re.findall(r"\w+|[^\w\s]+", text))


class FakeToolModel(GenericFakeChatModel):
    """GenericFakeChatModel that behaves like a provider's chat model.

    It accepts tools, names its provider in LangChain's tracing parameters
    (``ls_provider``), and reports token usage on each reply
    (``AIMessage.usage_metadata``), as ``ChatOpenAI`` or ``ChatAnthropic`` do.
    """

    model_name: str = "fake-weather-1"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "fake"
        params["ls_model_name"] = self.model_name
        return params

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        reply = result.generations[0].message
        prompt = sum(count_tokens(json.dumps(m.content)) + 4 for m in messages)
        prompt += count_tokens(json.dumps(kwargs.get("tools", [])))
        completion = count_tokens(json.dumps(reply.content)) + count_tokens(
            json.dumps(getattr(reply, "tool_calls", []))
        )
        if isinstance(reply, AIMessage):
            reply.usage_metadata = UsageMetadata(
                input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion
            )
        return result


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"21C and sunny in {city}"


def get_alerts(region: str) -> str:
    """Weather alerts for a region."""
    raise ToolException(f"alert feed for {region} is down")


TOOLS = {
    "get_weather": StructuredTool.from_function(get_weather),
    "get_alerts": StructuredTool.from_function(get_alerts, handle_tool_error=True),
}

MODEL = FakeToolModel(
    messages=iter(
        [
            AIMessage(
                "",
                tool_calls=[
                    {"name": "get_weather", "args": {"city": "Lisbon"}, "id": "call_1"},
                    {"name": "get_alerts", "args": {"region": "Lisbon"}, "id": "call_2"},
                ],
            ),
            AIMessage("It is 21C and sunny in Lisbon; no alert feed right now."),
        ]
    )
).bind_tools(list(TOOLS.values()))


def weather_agent(history: list[BaseMessage], config: RunnableConfig) -> list[BaseMessage]:
    """Call the model, run the tools it asks for, repeat until it answers."""
    history = list(history)
    while True:
        reply = MODEL.invoke(history, config)
        history.append(reply)
        if not reply.tool_calls:
            return history
        history.extend(TOOLS[call["name"]].invoke(call, config) for call in reply.tool_calls)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-sessions")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"langchain-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}.jsonl"

    processor = default_processor(path)
    bridge = SpanBridge(processor, file_uri=path)
    agent = RunnableLambda(weather_agent, name="weather-bot")
    with Session.create(path, observers=[bridge]) as session, session.begin_run() as run:
        handler = LoopscribeCallbackHandler(run)
        history = agent.invoke([HumanMessage("Weather in Lisbon?")], {"callbacks": [handler]})
    processor.shutdown()

    print(f"answer: {history[-1].content}")
    print(f"session {session.id} recorded to {path} ({len(list(read(path)))} records)")
    print(f"spans: {bridge.spans_emitted} (without an OTLP endpoint: {default_export_path(path)})")


if __name__ == "__main__":
    main()

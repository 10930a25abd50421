"""Record a two-turn pydantic-ai conversation with loopscribe and export its spans.

Offline: pydantic-ai's ``TestModel`` plays the model (it calls every tool,
then answers), so no provider is contacted. Run it with
``python examples/pydantic_ai_agent.py [DIR]``. The spans go to the OTLP
endpoint in ``OTEL_EXPORTER_OTLP_ENDPOINT`` if set, else to an OTLP JSON
file beside the session.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from loopscribe import Session, read
from loopscribe.adapters.pydantic_ai import LoopscribeCapability
from loopscribe.otel import SpanBridge, default_export_path, default_processor

agent = Agent(
    TestModel(custom_output_text="Sunny, 21°C."), name="weather-bot", instructions="Answer briefly."
)


@agent.tool_plain
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"21°C and sunny in {city}"


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-sessions")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"pydantic-ai-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}.jsonl"
    processor = default_processor(path)
    try:
        bridge = SpanBridge(processor, file_uri=path)
        with Session.create(path, observers=[bridge]) as session:
            # One loopscribe run per agent run; the second continues the conversation.
            with session.begin_run() as run:
                first = agent.run_sync(
                    "Weather in Lisbon?", capabilities=[LoopscribeCapability(run)]
                )
            with session.begin_run() as run:
                second = agent.run_sync(
                    "And in Porto?",
                    message_history=first.all_messages(),
                    capabilities=[LoopscribeCapability(run)],
                )
    finally:
        processor.shutdown()
    records = list(read(path))
    print(f"session {session.id} recorded to {path}")
    print(f"{len(records)} records, {bridge.spans_emitted} spans")
    print(f"spans (without an OTLP endpoint) in {default_export_path(path)}")
    print(f"final answer: {second.output!r}")


if __name__ == "__main__":
    main()

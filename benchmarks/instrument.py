"""Benchmark: an OpenAI chat call recorded by loopscribe.instrument, against the call alone.

The real ``openai`` SDK sends a chat completion with a 20-message history
(~26 KB of request body) and two tool declarations through an
``httpx2.MockTransport`` that answers with a canned response (a reply with
a tool call and usage); no network. In the same run, chunk by chunk in
turns:

* **plain** — the call without any instrumentation;
* **loopscribe** — ``loopscribe.instrument.openai()``, the call made inside
  a run made current with ``with session.begin_run()``, the session
  observed by a ``SpanBridge`` whose spans go to a ``BatchSpanProcessor``;
* **official** — ``opentelemetry-instrumentation-openai-v2`` with content
  capture on (``SPAN_ONLY``: messages as span attributes), its spans to a
  ``BatchSpanProcessor`` of the same kind.

Both exporters encode each batch as the OTLP protobuf request, as the SDK's
exporters do, and send nothing. The figure is the process CPU time per call
(best chunk across passes); the added cost is the difference to plain.
Target: loopscribe's added cost ≤ the official instrumentation's.

Run: ``.venv/bin/python benchmarks/instrument.py [--calls N] [--reps N]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
import openai
import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from loopscribe import Session, instrument
from loopscribe.otel import SpanBridge

RESPONSE = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check that file.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 6000, "completion_tokens": 40, "total_tokens": 6040},
    }
)
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} a file in the workspace",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name in ("read_file", "write_file")
]


def history() -> list[Any]:
    text = "def handler(event):\n    return event['body']\n" * 25  # ~1.3 KB
    messages: list[Any] = [{"role": "system", "content": "You are a careful coding agent."}]
    for i in range(19):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {text}"})
    return messages


class Encode(SpanExporter):
    """Encodes each batch as the OTLP request and sends nothing."""

    def __init__(self) -> None:
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bytes += len(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def client() -> openai.OpenAI:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=RESPONSE, headers={"content-type": "application/json"})

    return openai.OpenAI(
        api_key="sk-bench",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
    )


def calls(c: openai.OpenAI, messages: list[Any], n: int) -> None:
    for _ in range(n):
        c.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)


def cpu(fn: Callable[[], None]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per chunk")
    parser.add_argument("--reps", type=int, default=5, help="passes over the three setups")
    args = parser.parse_args()
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    messages = history()
    c = client()
    calls(c, messages, 20)  # warm the SDK's caches
    best: dict[str, float] = {}
    folder = Path(tempfile.mkdtemp(prefix="loopscribe-bench-"))

    def plain() -> None:
        calls(c, messages, args.calls)

    def loopscribe() -> None:
        processor = BatchSpanProcessor(Encode())
        bridge = SpanBridge(processor)
        with (
            instrument.openai(),
            Session.create(folder / f"{time.monotonic_ns()}.jsonl", observers=[bridge]) as s,
            s.begin_run(),
        ):
            calls(c, messages, args.calls)
        processor.force_flush()
        processor.shutdown()  # type: ignore[no-untyped-call]

    def official() -> None:
        provider = TracerProvider()
        processor = BatchSpanProcessor(Encode())
        provider.add_span_processor(processor)
        instrumentor = OpenAIInstrumentor()  # type: ignore[no-untyped-call]
        instrumentor.instrument(tracer_provider=provider)
        try:
            calls(c, messages, args.calls)
        finally:
            instrumentor.uninstrument()
        processor.force_flush()
        processor.shutdown()  # type: ignore[no-untyped-call]

    setups = {"plain": plain, "loopscribe": loopscribe, "official": official}
    for _ in range(args.reps):
        for name, fn in setups.items():
            per_call = cpu(fn) / args.calls
            best[name] = min(best.get(name, per_call), per_call)
    base = best["plain"]
    body = len(orjson.dumps({"model": "gpt-4o", "messages": messages, "tools": TOOLS}))
    print(f"OpenAI chat call, {body / 1024:.1f} KiB request, fake transport, CPU per call:")
    for name, value in best.items():
        print(f"  {name:<11} {value * 1e6:8.1f} us  ({value / base:.2f}x plain)")
    added_ls = best["loopscribe"] - base
    added_official = best["official"] - base
    print(
        f"added cost: loopscribe {added_ls * 1e6:.1f} us, official (content on) "
        f"{added_official * 1e6:.1f} us; ratio {added_ls / added_official:.2f}"
    )


if __name__ == "__main__":
    main()

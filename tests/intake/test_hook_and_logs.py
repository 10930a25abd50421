"""The completion hook and the log record twin, on util-genai's own handler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopscribe import read
from loopscribe.intake import LoopscribeCompletionHook, OffloadingLogProcessor, OffloadingProcessor

from ._support import replayed, session_files


def test_event_only_content_is_recorded_by_the_twin_and_named_on_the_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """util-genai's details event: content recorded, removed from the log; the span gets refs."""
    from opentelemetry.util.genai.handler import TelemetryHandler
    from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT", "true")
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(OffloadingProcessor(SimpleSpanProcessor(spans), tmp_path))
    logs = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    logger_provider = LoggerProvider()
    twin = OffloadingLogProcessor(SimpleLogRecordProcessor(logs), tmp_path)
    logger_provider.add_log_record_processor(twin)
    handler = TelemetryHandler(tracer_provider=tracer_provider, logger_provider=logger_provider)
    with handler.inference("openai", request_model="m") as invocation:
        call: Any = invocation  # its type differs between util-genai releases
        call.input_messages = [InputMessage("user", [Text("CANARY-IN hi")])]
        call.output_messages = [
            OutputMessage("assistant", [Text("CANARY-OUT yo")], finish_reason="stop")
        ]
    (log,) = logs.get_finished_logs()
    attributes = dict(log.log_record.attributes or {})
    assert "CANARY" not in json.dumps(attributes, default=str)
    assert "gen_ai.input.messages_ref" in attributes
    (span,) = spans.get_finished_spans()
    assert (span.attributes or {})["gen_ai.output.messages_ref"] == attributes[
        "gen_ai.output.messages_ref"
    ]
    (path,) = session_files(tmp_path)
    types = [r.type for r in read(path, decode=False)]
    assert types[-3:] == ["model_exec_end", "host_span", "run_close"]
    (again,) = replayed(tmp_path)
    assert dict(again.attributes or {}) == dict(span.attributes or {})


def test_the_hook_without_a_span_records_nothing_and_never_raises(tmp_path: Path) -> None:
    """Content without a span to name it: counted, logged, no exception into util-genai."""
    from opentelemetry.util.genai.types import InputMessage, Text

    hook = LoopscribeCompletionHook(tmp_path)
    hook.on_completion(
        inputs=[InputMessage("user", [Text("hi")])], outputs=[], system_instruction=[]
    )
    hook.on_completion(inputs=[], outputs=[], system_instruction=[], span=object())
    assert hook.failed == 1
    assert not session_files(tmp_path)


def test_the_hook_takes_its_folder_from_loopscribe_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LOOPSCRIBE_DIR names the folder; without it, the sessions home the CLI reads."""
    monkeypatch.setenv("LOOPSCRIBE_DIR", str(tmp_path / "x"))
    assert LoopscribeCompletionHook().book.directory == tmp_path / "x"
    monkeypatch.delenv("LOOPSCRIBE_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    assert LoopscribeCompletionHook().book.directory == tmp_path / "data" / "loopscribe"


def test_the_otel_package_offers_the_processor_without_importing_the_intake() -> None:
    """``loopscribe.otel.OffloadingProcessor`` is the intake's, imported only when asked for."""
    code = (
        "import sys, loopscribe.otel as o; a = 'loopscribe.intake' in sys.modules; "
        "from loopscribe.otel import OffloadingProcessor; "
        "from loopscribe.intake import OffloadingProcessor as P; print(a, OffloadingProcessor is P)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]

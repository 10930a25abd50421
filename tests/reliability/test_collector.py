"""The real OTLP/HTTP exporter behind SpanBridge, with a collector down, silent or flapping."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from loopscribe import Execution, Run, Session, read
from loopscribe import events as ev
from loopscribe.otel import SpanBridge, _export, default_processor, span_id

from ..otlp_receiver import Received, black_hole, closed_port, http_receiver

EXPORT_TIMEOUT_S = 1.0
CALLS_PER_ROUND = 1000  # two records each
ROUNDS = 3
THREADS_SETTLE_S = 5.0


@pytest.fixture(autouse=True)
def otlp_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only this module's OTLP settings apply: HTTP/protobuf with a 1 s timeout."""
    for name in list(os.environ):
        if name.startswith(("OTEL_EXPORTER_OTLP_", "OTEL_BSP_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(int(EXPORT_TIMEOUT_S)))


def record_calls(run: Run, prefix: str, count: int) -> None:
    """Record ``count`` tool calls (start and end)."""
    for i in range(count):
        ex = Execution(f"{prefix}{i}", "tool")
        run.record(ev.tool_exec_start(ex, "grep", {"q": i}))
        run.record(ev.tool_exec_end(ex, "grep", "no match"))


def settled_thread_count(baseline: int) -> int:
    """Wait until at most ``baseline`` threads are alive (or time is up); return the count."""
    deadline = time.monotonic() + THREADS_SETTLE_S
    while threading.active_count() > baseline and time.monotonic() < deadline:
        time.sleep(0.02)
    return threading.active_count()


def measure(path: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Record ROUNDS runs through a bridge to ``endpoint``; report the counts."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    baseline = threading.active_count()
    processor: Any = default_processor(path)
    bridge = SpanBridge(processor, file_uri=path)
    session = Session.create(path, observers=[bridge])
    for round_ in range(ROUNDS):
        with session.begin_run() as run:
            record_calls(run, f"r{round_}-", CALLS_PER_ROUND)
    session.close()
    processor.shutdown()
    return {
        "baseline": baseline,
        "threads": settled_thread_count(baseline),
        "accepted": processor.accepted_spans,
        "exported": processor.exported_spans,
        "dropped": processor.dropped_spans,
        "bridge_dropped": bridge.dropped_spans,
    }


@contextlib.contextmanager
def unreachable(kind: str) -> Iterator[str]:
    """An endpoint where no collector answers: a closed port or a black hole."""
    if kind == "closed-port":
        yield f"http://127.0.0.1:{closed_port()}"
    else:
        with black_hole() as endpoint:
            yield endpoint


@pytest.mark.parametrize("kind", ["closed-port", "black-hole"])
def test_unreachable_collector_costs_the_recorder_nothing(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No answering collector: everything recorded, drops counted and logged, threads flat.

    That recording and closing never wait on the export is proven with an exporter
    blocked on an event below; ``benchmarks/collector_down.py`` measures the latency.
    """
    with http_receiver() as received:
        up = measure(tmp_path / "up.jsonl", received.endpoint, monkeypatch)
    assert up["dropped"] == 0
    assert up["exported"] == up["accepted"] == ROUNDS * (CALLS_PER_ROUND + 1)
    assert up["threads"] <= up["baseline"]

    caplog.set_level(logging.WARNING, logger="loopscribe.otel")
    with unreachable(kind) as endpoint:
        down = measure(tmp_path / "down.jsonl", endpoint, monkeypatch)
        assert down["threads"] <= down["baseline"], "exporter threads outlived shutdown"
    assert len(list(read(tmp_path / "down.jsonl"))) == len(list(read(tmp_path / "up.jsonl")))
    assert down["exported"] == 0
    assert down["bridge_dropped"] == 0  # the processor never raised into the bridge
    assert down["dropped"] == down["accepted"] == ROUNDS * (CALLS_PER_ROUND + 1)
    warnings = [r.getMessage() for r in caplog.records if r.name == "loopscribe.otel"]
    assert any(
        f"{down['dropped']} of {down['accepted']} spans were not exported" in m for m in warnings
    )
    assert not any(endpoint in m for m in warnings)


class BlockedExporter(SpanExporter):
    """An exporter whose every export hangs until the test sets ``release``."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait()
        self.returned.set()
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """Nothing to close; an export in progress stays blocked."""


def test_recording_and_closing_never_wait_on_a_blocked_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With the exporter stuck in an export, record() returns and shutdown gives up in time.

    The exporter stays blocked until the end of the test: every call that returns
    while ``release`` is unset did not wait for the export. Shutdown must give up
    after the configured timeout (0.1 s). The 5 s it is given here is no latency
    target: it only tells that from a shutdown that waits 10 s (the default
    timeout), 60 s (the environment's, here overridden by the argument) or 30 s
    (the stock processor's).
    """
    exporter = BlockedExporter()
    monkeypatch.setattr(_export, "default_exporter", lambda *args, **kwargs: exporter)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60")  # the argument below must win
    caplog.set_level(logging.WARNING, logger="loopscribe.otel")
    path = tmp_path / "blocked.jsonl"
    processor: Any = default_processor(
        path, export_timeout_millis=100, schedule_delay_millis=10, max_export_batch_size=8
    )
    session = Session.create(path, observers=[SpanBridge(processor, file_uri=path)])
    recorded, closed = threading.Event(), threading.Event()

    def record_then_close() -> None:
        with session.begin_run() as run:
            record_calls(run, "first-", 1)
            assert exporter.entered.wait(10), "the batch worker never exported"
            record_calls(run, "blocked-", CALLS_PER_ROUND)
        recorded.set()
        session.close()
        processor.shutdown()
        closed.set()

    worker = threading.Thread(target=record_then_close, daemon=True)
    worker.start()
    try:
        assert recorded.wait(30), "record() waited for the blocked export"
        assert closed.wait(5), "shutdown waited for the blocked export"
        assert not exporter.returned.is_set()
    finally:
        exporter.release.set()
        worker.join(30)
    assert processor.exported_spans == 0
    assert processor.dropped_spans == processor.accepted_spans == CALLS_PER_ROUND + 2
    assert any(
        f"{CALLS_PER_ROUND + 2} of {CALLS_PER_ROUND + 2} spans were not exported" in r.getMessage()
        for r in caplog.records
        if r.name == "loopscribe.otel"
    )
    assert len(list(read(path))) == 2 * (CALLS_PER_ROUND + 1) + 3


class RestartableReceiver:
    """An OTLP/HTTP receiver that can be stopped and started again on the same port."""

    def __init__(self) -> None:
        self.port = closed_port()
        self.received = Received(f"http://127.0.0.1:{self.port}")
        self._running: contextlib.ExitStack | None = None

    def start(self) -> None:
        """Listen and answer OTLP export requests."""
        self._running = contextlib.ExitStack()
        self._running.enter_context(http_receiver(self.port, self.received))

    def stop(self) -> None:
        """Stop listening; connection attempts are refused until ``start``."""
        if self._running is not None:
            self._running.close()
        self._running = None


def span_ids(session: Session, run: Run, prefix: str, count: int) -> set[str]:
    """The hex span IDs of the tool calls ``record_calls`` made with ``prefix``."""
    return {f"{span_id(session.id, run.id, f'{prefix}{i}', 1):016x}" for i in range(count)}


def wait_for(ids: set[str], received: Received, processor: Any) -> bool:
    """Flush until every span in ``ids`` arrived, for at most 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        processor.force_flush(int(EXPORT_TIMEOUT_S * 2000))
        if ids <= {s.span_id.hex() for s in received.spans()}:
            return True
        time.sleep(0.05)
    return False


def test_export_resumes_after_the_collector_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Spans recorded while the collector is down count as dropped; later ones arrive."""
    caplog.set_level(logging.WARNING, logger="loopscribe.otel")
    receiver = RestartableReceiver()
    receiver.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.received.endpoint)
        baseline = threading.active_count()
        path = tmp_path / "flap.jsonl"
        processor: Any = default_processor(path, schedule_delay_millis=50)
        session = Session.create(path, observers=[SpanBridge(processor, file_uri=path)])
        run = session.begin_run()
        count = 20
        record_calls(run, "before-", count)
        assert wait_for(span_ids(session, run, "before-", count), receiver.received, processor)

        receiver.stop()
        record_calls(run, "down-", count)
        # force_flush reports that the queue was worked off, not that the export succeeded.
        processor.force_flush(int(EXPORT_TIMEOUT_S * 3000))
        assert processor.dropped_spans == count

        receiver.start()
        record_calls(run, "after-", count)
        assert wait_for(span_ids(session, run, "after-", count), receiver.received, processor)

        session.close()
        processor.shutdown()
        assert processor.dropped_spans == count
        assert processor.exported_spans == 2 * count + 1  # and the run's root span
        arrived = {s.span_id.hex() for s in receiver.received.spans()}
        assert not arrived & span_ids(session, run, "down-", count)
        assert settled_thread_count(baseline) <= baseline
    finally:
        receiver.stop()
    assert any(
        f"{count} of {2 * count + 1 + count} spans were not exported" in r.getMessage()
        for r in caplog.records
        if r.name == "loopscribe.otel"
    )

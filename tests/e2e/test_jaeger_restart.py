"""The Collector follows growing span files and resumes from its file storage after a restart.

One session's spans are written to its span file a part at a time, one
export batch per line as loopscribe writes them: some before the Collector
starts, some while it runs (the file grows under it), some while it is
stopped (it must resume where it stopped, from ``file_storage``), and a
last line after the restart. That last line is the sentinel: the receiver
reads a file in order, so once its spans are in Jaeger, any span read twice
would be there too. Then Jaeger must hold every span exactly once.
"""

from __future__ import annotations

import signal
from pathlib import Path

from ._sessions import append_lines, chunks, session_spans
from ._spans import Span, assert_same_spans, jaeger_spans, wait_for_spans
from ._stack import ARRIVAL_TIMEOUT_S, Jaeger, start_collector, wait_for


def test_restart_resumes_from_file_storage_and_growth_is_followed(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    """Written before, during, between and after two Collector runs: each span once."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    session = sessions / "restart.jsonl"
    batches = chunks(session_spans(session, runs=12), 3)  # 60 spans, 20 lines
    span_file = sessions / "restart.jsonl.otlp.jsonl"
    storage = tmp_path / "storage"

    written: list[Span] = append_lines(span_file, batches[:5])
    files = f"{sessions}/*.otlp.jsonl"
    first = start_collector(tmp_path, jaeger=jaeger, files=files, storage=storage)
    try:
        wait_for_spans(jaeger, written, extra=first.program.log_tail())
        # The file grows while the Collector runs.
        written += append_lines(span_file, batches[5:10])
        wait_for_spans(jaeger, written, extra=first.program.log_tail())
    finally:
        code = first.stop(signal.SIGTERM)
    assert code == 0, first.program.log_tail()

    # Written while no Collector runs: the next one starts from the saved offset.
    written += append_lines(span_file, batches[10:-1])
    second = start_collector(tmp_path, jaeger=jaeger, files=files, storage=storage)
    try:
        wait_for_spans(jaeger, written, extra=second.program.log_tail())
        written += append_lines(span_file, batches[-1:])  # the sentinel
        wait_for_spans(jaeger, written, extra=second.program.log_tail())
        second.program.check_alive()
    finally:
        second.stop()
    assert len(written) == 60
    assert_same_spans(jaeger_spans(jaeger, {s.trace_id for s in written}), written)


def test_a_collector_stopped_while_spans_are_in_flight_resumes_without_loss_or_twice(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    """SIGTERM once the first of 200 lines reached Jaeger; the next run sends the rest once."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    batches = chunks(session_spans(sessions / "inflight.jsonl", runs=40), 1)  # 200 lines
    span_file = sessions / "inflight.jsonl.otlp.jsonl"
    files = f"{sessions}/*.otlp.jsonl"
    storage = tmp_path / "storage"
    first = start_collector(tmp_path, jaeger=jaeger, files=files, storage=storage)
    try:
        written = append_lines(span_file, batches[:-1])
        traces = {s.trace_id for s in written}

        def some_arrived() -> int | None:
            first.program.check_alive()
            return len(jaeger_spans(jaeger, traces)) or None

        arrived = wait_for(
            "the first spans in Jaeger",
            some_arrived,
            timeout_s=ARRIVAL_TIMEOUT_S,
            detail=first.program.log_tail,
        )
    finally:
        code = first.stop(signal.SIGTERM)
    assert code == 0, first.program.log_tail()
    at_stop = len(jaeger_spans(jaeger, traces))
    print(f"spans in Jaeger: {arrived} when seen, {at_stop} after the stop, of {len(written)}")
    second = start_collector(tmp_path, jaeger=jaeger, files=files, storage=storage)
    try:
        wait_for_spans(jaeger, written, extra=second.program.log_tail())
        written += append_lines(span_file, batches[-1:])  # the sentinel
        wait_for_spans(jaeger, written, extra=second.program.log_tail())
    finally:
        second.stop()
    assert_same_spans(jaeger_spans(jaeger, {s.trace_id for s in written}), written)

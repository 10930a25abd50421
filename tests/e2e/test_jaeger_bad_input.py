"""Damaged and foreign span files: the Collector and Jaeger keep going.

What each test expects:

* the Collector keeps running and keeps reading (a good file written after
  the bad input still arrives); it drops a bad line without a word at its
  default log level;
* Jaeger keeps running and holds every span of every complete, valid line
  exactly once, and nothing of the bad lines;
* a line that is not an OTLP request (foreign text, other JSON, binary) is
  dropped alone; the lines around it arrive;
* a torn last line is not read until loopscribe's next export cuts it back
  and writes it whole; then it arrives (this needs ``force_flush_period: 0s``
  in the pipeline files: with the default the line was lost);
* a file renamed over a followed span file is read from its start.
"""

from __future__ import annotations

import os
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan

from loopscribe.otel import encode_otlp_json

from ._sessions import append_lines, as_spans, chunks, session_spans
from ._spans import Span, assert_same_spans, jaeger_spans, wait_for_spans
from ._stack import Collector, Jaeger, start_collector


def _collector(jaeger: Jaeger, tmp_path: Path, folder: Path) -> Collector:
    return start_collector(
        tmp_path, jaeger=jaeger, files=f"{folder}/*.otlp.jsonl", storage=tmp_path / "storage"
    )


def _still_working(
    jaeger: Jaeger, collector: Collector, folder: Path, tmp_path: Path, name: str = "after"
) -> list[Span]:
    """A good span file written now arrives: both programs still work. Its spans."""
    spans = session_spans(tmp_path / f"{name}.jsonl", runs=1)
    good = append_lines(folder / f"{name}.jsonl.otlp.jsonl", [spans])
    wait_for_spans(jaeger, good, extra=collector.program.log_tail())
    collector.program.check_alive()
    jaeger.program.check_alive()
    return good


def _batches(tmp_path: Path, name: str, runs: int) -> list[list[ReadableSpan]]:
    return chunks(session_spans(tmp_path / f"{name}.jsonl", runs=runs), 5)


def test_a_torn_last_line_leaves_the_complete_lines_and_the_collector_going(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    """Complete lines before a torn last line arrive; the torn line's spans do not."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    span_file = folder / "torn.jsonl.otlp.jsonl"
    batches = _batches(tmp_path, "torn", runs=3)  # 15 spans, 3 lines
    complete = append_lines(span_file, batches[:2])
    torn = encode_otlp_json(batches[2])
    with span_file.open("ab") as f:
        f.write(torn[: len(torn) // 2])  # a writer killed in the middle of a line
    collector = _collector(jaeger, tmp_path, folder)
    try:
        wait_for_spans(jaeger, complete, extra=collector.program.log_tail())
        good = _still_working(jaeger, collector, folder, tmp_path)
        lost = {s.trace_id for s in as_spans(batches[2])} - {s.trace_id for s in complete}
        assert not jaeger_spans(jaeger, lost), "spans of the torn line reached Jaeger"
        stored = jaeger_spans(jaeger, {s.trace_id for s in complete + good})
        assert_same_spans(stored, complete + good)
    finally:
        collector.stop()


def test_a_torn_line_cut_back_by_the_next_export_is_delivered_whole(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    """After a crash mid-line, loopscribe's next export cuts the torn line back and rewrites it.

    The Collector read the torn half already (it hands on a line without
    its newline once it stopped growing); the rewritten line must still
    arrive, and nothing twice.
    """
    folder = tmp_path / "sessions"
    folder.mkdir()
    span_file = folder / "repaired.jsonl.otlp.jsonl"
    batches = _batches(tmp_path, "repaired", runs=3)
    complete = append_lines(span_file, batches[:2])
    torn = encode_otlp_json(batches[2])
    with span_file.open("ab") as f:
        f.write(torn[: len(torn) // 2])
    collector = _collector(jaeger, tmp_path, folder)
    try:
        wait_for_spans(jaeger, complete, extra=collector.program.log_tail())
        # Two more poll cycles of the receiver: the torn half has been read.
        good = _still_working(jaeger, collector, folder, tmp_path, "after-1")
        good += _still_working(jaeger, collector, folder, tmp_path, "after-2")
        repaired = append_lines(span_file, batches[2:])
        assert span_file.read_bytes().endswith(torn), "the exporter did not cut the torn line back"
        wait_for_spans(jaeger, repaired, extra=collector.program.log_tail())
        stored = jaeger_spans(jaeger, {s.trace_id for s in complete + repaired + good})
        assert_same_spans(stored, complete + repaired + good)
    finally:
        collector.stop()


def test_a_span_file_replaced_under_the_collector_is_read_anew(
    jaeger: Jaeger, tmp_path: Path
) -> None:
    """A file renamed over a span file being followed: its spans arrive, the old ones once."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    span_file = folder / "replaced.jsonl.otlp.jsonl"
    old = append_lines(span_file, _batches(tmp_path, "old", runs=2))
    collector = _collector(jaeger, tmp_path, folder)
    try:
        wait_for_spans(jaeger, old, extra=collector.program.log_tail())
        staged = tmp_path / "staged.otlp.jsonl"
        new = append_lines(staged, _batches(tmp_path, "new", runs=2))
        os.replace(staged, span_file)
        wait_for_spans(jaeger, new, extra=collector.program.log_tail())
        good = _still_working(jaeger, collector, folder, tmp_path)
        stored = jaeger_spans(jaeger, {s.trace_id for s in old + new + good})
        assert_same_spans(stored, old + new + good)
    finally:
        collector.stop()


FOREIGN_LINES = [
    b"not json at all\n",
    b'{"resourceSpans": "not a list"}\n',
    b'{"hello": "world"}\n',
    b"\x00\xff\xfe binary \x80\x81\n",
    b"\n",
    b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": 1}]}]}]}\n',
    b"[1, 2, 3]\n",
]
"""Lines no loopscribe writer produces: text, other JSON, binary, an invalid request."""


def test_foreign_lines_in_a_span_file_are_dropped_alone(jaeger: Jaeger, tmp_path: Path) -> None:
    """Valid lines between foreign ones arrive, each span once; the Collector keeps reading."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    span_file = folder / "foreign.jsonl.otlp.jsonl"
    batches = _batches(tmp_path, "foreign", runs=4)  # 20 spans, 4 lines
    valid: list[Span] = []
    for index, batch in enumerate(batches):
        valid += append_lines(span_file, [batch])
        with span_file.open("ab") as f:
            f.write(FOREIGN_LINES[index % len(FOREIGN_LINES)])
            f.write(FOREIGN_LINES[(index + 3) % len(FOREIGN_LINES)])
    collector = _collector(jaeger, tmp_path, folder)
    try:
        wait_for_spans(jaeger, valid, extra=collector.program.log_tail())
        good = _still_working(jaeger, collector, folder, tmp_path)
        stored = jaeger_spans(jaeger, {s.trace_id for s in valid + good})
        assert_same_spans(stored, valid + good)
    finally:
        collector.stop()

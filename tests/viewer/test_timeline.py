"""The run timeline: every bar is a span, folded incrementally as the file grows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loopscribe import CorruptRecordError, Execution, FormatError, Session, UserMessage
from loopscribe import events as ev
from loopscribe._preview import PREVIEW_CHARS
from loopscribe.otel import replay
from loopscribe.testing import captured_spans
from loopscribe.viewer import SessionTimeline, load_timeline

from .conftest import Demo, record_demo


def test_every_bar_is_the_span_the_bridge_exports(demo: Demo) -> None:
    """Bars carry the bridge's span IDs, parents, names, times and error status."""
    captured = captured_spans()
    replay(demo.path, captured.processor)
    spans = {s.context.span_id: s for s in captured.exporter.get_finished_spans() if s.context}
    timeline = load_timeline(demo.path)
    (run,) = timeline.iter_runs()
    assert run.trace_id == int(demo.trace_hex, 16)
    assert run.span_id in spans
    assert len(run.bars) == len(spans) - 1
    for bar in run.bars.values():
        span = spans[bar.span_id]
        assert span.parent is not None
        assert bar.parent_span_id == span.parent.span_id
        assert bar.name == span.name
        assert span.start_time is not None
        assert span.end_time is not None
        assert bar.end is not None
        assert (bar.end - bar.start).total_seconds() * 1e9 == pytest.approx(
            span.end_time - span.start_time, abs=1000
        )
        assert (bar.state == "error") == (span.status.status_code.name == "ERROR")
        assert bar.seq_first == span.attributes["loopscribe.seq.first"]  # type: ignore[index]
        assert bar.seq_last == span.attributes["loopscribe.seq.last"]  # type: ignore[index]


def test_retries_errors_and_rows(demo: Demo) -> None:
    """A retry shares its execution's row, the failed attempt is marked retried."""
    run = next(load_timeline(demo.path).iter_runs())
    failed, retried = run.bars[("model_2", 1)], run.bars[("model_2", 2)]
    assert (failed.state, failed.error_type, failed.retried) == ("error", "RateLimitError", True)
    assert (retried.state, retried.retried) == ("ok", False)
    # retry_scheduled comes after the failed attempt's end: listed, not timed.
    assert failed.seqs[-1] > failed.seq_last
    assert run.bars[("call_py", 1)].state == "error"
    rows = run.rows()
    assert [(depth, exec_id) for depth, exec_id, _ in rows] == [
        (0, "agent"),
        (1, "turn_1"),
        (2, "model_1"),
        (2, "call_search"),
        (2, "call_fetch"),
        (1, "turn_2"),
        (2, "model_2"),
        (2, "call_py"),
        (1, "turn_3"),
        (2, "model_3"),
    ]
    assert [b.execution.attempt for b in rows[6][2]] == [1, 2]
    counts = run.counts()
    assert counts == {
        "executions": 11,
        "model_calls": 4,
        "tool_calls": 3,
        "errors": 2,
        "retries": 1,
    }


def test_timeline_json_never_holds_a_body(tmp_path: Path) -> None:
    """The timeline names records by seq and labels bars; of a body only a one-line preview."""
    demo = record_demo(tmp_path / "s.jsonl", big_output="SECRET-BODY " * 1000)
    data = next(load_timeline(demo.path).iter_runs()).to_json()
    text = repr(data)
    assert text.count("SECRET-BODY") <= PREVIEW_CHARS // len("SECRET-BODY ") + 1
    bars = [bar for row in data["rows"] for bar in row["bars"]]
    for bar in bars:
        for key in ("preview", "outcome", "error_text"):
            assert bar[key] is None or len(bar[key]) <= PREVIEW_CHARS
    fetch = next(bar for bar in bars if bar["id"] == "call_fetch")
    assert fetch["outcome"].startswith("SECRET-BODY SECRET-BODY")
    assert fetch["outcome"].endswith("…")
    bar = data["rows"][3]["bars"][0]
    assert bar["span_id"] == demo.span_hex("call_search")
    assert bar["label"] == "search"
    assert bar["start_us"] >= 0
    assert bar["end_us"] > bar["start_us"]


def test_refresh_reads_only_what_was_appended(tmp_path: Path) -> None:
    """A growing file is read from where the fold stopped; an unchanged one not at all."""
    path = tmp_path / "live.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        timeline = SessionTimeline(path)
        assert timeline.refresh()
        assert not timeline.refresh()
        before = timeline.end_offset
        tool = Execution("call_1", "tool")
        run.record(ev.tool_exec_start(tool, "grep", {"pattern": "x"}))
        assert timeline.refresh()
        assert timeline.end_offset > before
        live = timeline.runs[run.id]
        bar = live.bars[("call_1", 1)]
        assert bar.state == "open"
        assert not live.closed
        # A half-written line is not read until its newline arrives.
        with open(path, "ab") as f:
            f.write(b'{"session_id":"')
        assert timeline.refresh()
        assert timeline.records == 3
        os.truncate(path, timeline.end_offset)
        run.record(ev.tool_exec_end(tool, "grep", "found"))
        assert timeline.refresh()
        ended = live.bars[("call_1", 1)]
        assert (ended.state, ended.end is not None) == ("ok", True)
    timeline.refresh()
    assert live.closed
    assert live.state == "ok"


def test_an_attempt_open_at_run_close_is_incomplete(tmp_path: Path) -> None:
    """As the bridge marks it loopscribe.incomplete, the bar ends at run_close."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        run.record(ev.model_request(Execution("m", "model"), [UserMessage("hi")]))
    bar = next(load_timeline(path).iter_runs()).bars[("m", 1)]
    assert bar.state == "incomplete"
    assert bar.end is not None


def test_a_replaced_file_is_folded_anew(tmp_path: Path) -> None:
    """A different inode means a different file: the fold starts over."""
    path = tmp_path / "s.jsonl"
    first = record_demo(path)
    timeline = load_timeline(path)
    other = tmp_path / "other.jsonl"
    second = record_demo(other)
    other.replace(path)
    assert timeline.refresh()
    assert timeline.session_id == second.session_id != first.session_id


def test_damaged_and_foreign_files_raise(tmp_path: Path) -> None:
    """A corrupt line names file and offset; a file without session_start is refused."""
    demo = record_demo(tmp_path / "s.jsonl")
    with open(demo.path, "ab") as f:
        f.write(b"not json\n")
    with pytest.raises(CorruptRecordError, match=r"s\.jsonl:\d+: byte \d+"):
        load_timeline(demo.path)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(FormatError, match="not a session file"):
        load_timeline(empty)


def record_many(path: Path, calls: int, *, every_error: int = 0) -> tuple[str, str]:
    """A run with ``calls`` tool calls in one turn (every ``every_error``-th one failing)."""
    from datetime import UTC, datetime, timedelta

    from loopscribe import Execution
    from loopscribe import events as ev

    # Scripted times that end just before run_close, which is written at the real time.
    t = datetime.now(UTC) - timedelta(milliseconds=calls + 100)
    with Session.create(path) as session, session.begin_run() as run:
        agent = Execution("agent", "agent")
        run.record(ev.agent_start(agent, "bulk", timestamp=t))
        turn = Execution("turn", "turn", parent_id="agent")
        run.record(ev.turn_start(turn, 1, timestamp=t))
        for i in range(calls):
            ex = Execution(f"call_{i}", "tool", parent_id="turn")
            start = t + timedelta(milliseconds=i)
            run.record(ev.tool_exec_start(ex, "lookup", {"n": i}, timestamp=start))
            failed = bool(every_error) and i % every_error == every_error - 1
            run.record(
                ev.tool_exec_end(
                    ex,
                    "lookup",
                    f"value {i}",
                    is_error=failed,
                    timestamp=start + timedelta(microseconds=700),
                )
            )
        end = t + timedelta(milliseconds=calls + 1)
        run.record(ev.turn_end(turn, 1, timestamp=end))
        run.record(ev.agent_end(agent, "bulk", timestamp=end))
        return session.id, run.id


def test_rows_are_paged_and_a_selected_span_brings_its_page(tmp_path: Path) -> None:
    """A long run is sent a page of rows at a time; a span's page is found for it."""
    from loopscribe.otel import span_id

    sid, rid = record_many(tmp_path / "many.jsonl", 1_000, every_error=100)
    run = next(load_timeline(tmp_path / "many.jsonl").iter_runs())
    page = run.to_json(limit=100)
    assert len(page["rows"]) == 100
    assert (page["offset"], page["total_rows"], page["all_rows"]) == (0, 1_002, 1_002)
    assert page["rows"][0]["descendants"] == 1_001  # the agent holds everything
    later = run.to_json(offset=500, limit=100)
    assert [r["index"] for r in later["rows"]] == list(range(500, 600))
    wanted = span_id(sid, rid, "call_950", 1)
    found = run.to_json(limit=100, select=wanted)
    assert found["offset"] == 900
    assert any(b["span_id"] == f"{wanted:016x}" for r in found["rows"] for b in r["bars"])
    # Every failure is counted on the minimap and listed, whatever the page.
    assert sum(found["minimap"]["errors"]) >= 10
    assert len(found["errors"]) == 10
    assert found["errors"][0]["error_text"] == "value 99"


def test_collapsed_subtrees_are_folded_and_reopened_for_a_selection(tmp_path: Path) -> None:
    from loopscribe.otel import span_id

    sid, rid = record_many(tmp_path / "many.jsonl", 300)
    run = next(load_timeline(tmp_path / "many.jsonl").iter_runs())
    folded = run.to_json(limit=100, collapsed=frozenset({"turn"}))
    assert folded["total_rows"] == 2
    assert [(r["id"], r["collapsed"]) for r in folded["rows"]] == [
        ("agent", False),
        ("turn", True),
    ]
    # Selecting a bar inside the folded turn opens it again.
    inside = run.to_json(
        limit=100, collapsed=frozenset({"turn"}), select=span_id(sid, rid, "call_250", 1)
    )
    assert inside["collapsed"] == []
    assert inside["offset"] == 200

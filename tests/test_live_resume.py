"""A live bridge in the process that resumes a run exports the run where replay puts it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan

from loopscribe import Event, Execution, Session, read
from loopscribe.otel import SpanBridge, replay
from loopscribe.testing import captured_spans

HOST = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

DETACHING_WRITER = textwrap.dedent(
    """
    import sys
    from loopscribe import Event, Execution, Session
    with Session.create(sys.argv[1]) as s:
        run = s.begin_run(parent=sys.argv[2] or None)
        turn = Execution("t1", "turn")
        run.record(Event("turn_start", turn))
        run.record(Event("turn_end", turn))
        run.detach()
        print(run.id)
    """
)


def resume_live(path: Path, run_id: str) -> list[ReadableSpan]:
    """Resume ``run_id`` in this process with a live SpanBridge; the spans it exported."""
    live = captured_spans()
    with Session.open(path, observers=[SpanBridge(live.processor, file_uri=path)]) as again:
        run = again.resume_run(run_id)
        turn = Execution("t2", "turn")
        run.record(Event("turn_start", turn))
        run.record(Event("turn_end", turn))
        run.close()
    return list(live.spans)


def run_span(spans: list[ReadableSpan]) -> ReadableSpan:
    """The run's root span."""
    roots = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(roots) == 1
    return roots[0]


def test_a_resumed_run_keeps_its_host_trace_start_and_gap_live_and_replayed(
    tmp_path: Path,
) -> None:
    """Detached in one process, resumed in this one: live spans equal replayed ones."""
    for host in (HOST, ""):
        path = tmp_path / f"s{len(host)}.jsonl"
        first = subprocess.run(
            [sys.executable, "-c", DETACHING_WRITER, str(path), host],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        run_id = first.stdout.strip()
        live_spans = resume_live(path, run_id)
        replayed = captured_spans()
        replay(path, replayed.processor, file_uri=path)
        live, again = run_span(live_spans), run_span(list(replayed.spans))
        records = list(read(path))
        start = next(r for r in records if r.type == "run_start")
        gap = next(r for r in records if r.type == "run_resume")
        host_trace = int(HOST[3:35], 16) if host else trace_of(again)
        for span in (live, again):
            assert trace_of(span) == host_trace
            assert attribute(span, "loopscribe.run.resumed_at_seq") == (gap.seq,)
            assert attribute(span, "loopscribe.seq.first") == start.seq
        for name in ("context", "parent", "start_time", "end_time", "attributes"):
            assert getattr(live, name) == getattr(again, name), name
        # The turn that ran wholly after the resume is the same span both ways.
        live_turn, replayed_turn = (
            next(s for s in spans if attribute(s, "loopscribe.execution.id") == "t2")
            for spans in (live_spans, list(replayed.spans))
        )
        assert live_turn.context == replayed_turn.context
        assert live_turn.start_time == replayed_turn.start_time


def trace_of(span: ReadableSpan) -> int:
    """The span's trace ID."""
    assert span.context is not None
    return int(span.context.trace_id)


def attribute(span: ReadableSpan, name: str) -> object:
    """One of the span's attributes."""
    assert span.attributes is not None
    return span.attributes.get(name)

"""The session page's list of runs: built once per run state, never stale."""

from __future__ import annotations

from pathlib import Path

from loopscribe import Execution, Session, Usage
from loopscribe import events as ev
from loopscribe._timeline import load_timeline
from loopscribe.viewer._catalog import run_summary_json


def test_a_run_summary_is_reused_until_the_run_changes(tmp_path: Path) -> None:
    """The same answer while the file is unchanged; new counts and end once it grows."""
    path = tmp_path / "s.jsonl"
    with Session.create(path) as session:
        run = session.begin_run()
        model = Execution("m", "model")
        run.record(ev.model_exec_start(model, "m-1"))
        timeline = load_timeline(path)
        (folded,) = timeline.iter_runs()
        first = run_summary_json(folded)
        assert run_summary_json(folded) is first  # nothing changed: not built again
        assert (first["counts"]["model_calls"], first["end"], first["state"]) == (1, None, "open")
        run.record(ev.model_exec_end(model, usage=Usage(3, 4)))
        run.record(ev.tool_exec_start(Execution("t", "tool"), "grep"))
        run.close()
        timeline.refresh()
        later = run_summary_json(folded)
        assert later is not first
        assert (later["counts"]["tool_calls"], later["state"]) == (1, "ok")
        assert later["end"] is not None
        assert later["seq_last"] > first["seq_last"]

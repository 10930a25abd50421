"""loopscribe._stats: the numbers of a session, from the same timeline the viewer draws."""

from __future__ import annotations

from pathlib import Path

import orjson

from loopscribe import Execution, Session, Usage
from loopscribe import events as ev
from loopscribe._stats import SessionStats, session_stats, timeline_stats
from loopscribe._timeline import load_timeline
from loopscribe.importers import claude_code, codex

from ..importers._support import DATA
from .conftest import Demo


def test_numbers_of_the_demo(demo: Demo) -> None:
    """Calls, errors, retries, tokens by model and the slowest leaf executions."""
    stats = session_stats(demo.path, top=2)
    assert (stats.session_id, stats.title, stats.records) == (demo.session_id, "research demo", 37)
    (run,) = stats.runs
    assert (run.model_calls, run.tool_calls, run.errors, run.retries) == (4, 3, 2, 1)
    assert (run.input_tokens, run.output_tokens) == (3974, 223)
    assert [s.execution_id for s in run.slowest] == ["model_3", "model_2"]
    assert all(s.kind != "turn" for s in run.slowest)
    assert stats.total("errors") == 2
    assert stats.to_json()["runs"][0]["slowest"][0]["name"] == "chat gpt-demo"


def test_an_open_run_counts_so_far(tmp_path: Path) -> None:
    """A run still being written has a duration up to its last record and open executions."""
    path = tmp_path / "open.jsonl"
    with Session.create(path) as session:
        run = session.begin_run()
        model = Execution("m", "model")
        run.record(ev.model_exec_start(model, "m-1"))
        run.record(ev.model_exec_end(model, usage=Usage(5, 7)))
        run.record(ev.tool_exec_start(Execution("t", "tool"), "sleep"))
        (stats,) = session_stats(path).runs
        assert stats.state == "open"
        assert stats.end is None
        assert (stats.model_calls, stats.tool_calls) == (1, 1)
        assert stats.tokens[0].model == "m-1"
        assert sorted(s.state for s in stats.slowest) == ["ok", "open"]
        run.close()


def test_a_session_without_runs(tmp_path: Path) -> None:
    """No runs: zero everywhere, nothing to rank."""
    path = tmp_path / "empty.jsonl"
    Session.create(path).close()
    stats = session_stats(path)
    assert stats.runs == ()
    assert stats.duration_us == 0
    assert stats.to_json()["model_calls"] == 0
    assert orjson.loads(b"".join(stats.json_parts())) == stats.to_json()


def _whole(path: Path) -> SessionStats:
    """The numbers folded from the viewer's whole timeline (what ``stats`` did before)."""
    return timeline_stats(load_timeline(path))


def test_streamed_numbers_equal_the_whole_timeline(tmp_path: Path) -> None:
    """Folding run by run (bars dropped at run_close) gives the numbers of the whole timeline."""
    out = tmp_path / "out"
    for path in sorted((DATA / "claude-code").glob("*.jsonl")):
        claude_code.import_transcript(path, out, finished=True)
    for path in sorted((DATA / "codex").glob("*.jsonl")):
        codex.import_transcript(path, out, finished=True)
    sessions = sorted(out.glob("*.jsonl"))
    assert len(sessions) >= 11
    for session in sessions:
        stats = session_stats(session)
        assert len(stats.runs) > 0
        assert stats == _whole(session)
        # --json writes the same text a run at a time.
        assert b"".join(stats.json_parts()) == orjson.dumps(stats.to_json())


def test_a_record_after_run_close_folds_the_file_again(tmp_path: Path) -> None:
    """A late record for a closed run changes its numbers: they equal the whole timeline's."""
    path = tmp_path / "late.jsonl"
    with Session.create(path) as session:
        first = session.begin_run()
        model = Execution("m", "model")
        first.record(ev.model_exec_start(model, "m-1"))
        first.record(ev.model_exec_end(model, usage=Usage(5, 7)))
        first.close()
        second = session.begin_run()
        second.record(ev.model_exec_start(Execution("n", "model"), "m-2"))
        second.close()
        sid, run_id, seq = session.id, first.id, session.next_seq
    late = {
        "session_id": sid,
        "seq": seq,
        "type": "tool_exec_end",
        "run_id": run_id,
        "ts": "2030-01-01T00:00:00.000000Z",
        "execution": {"id": "late", "kind": "tool", "attempt": 1},
        "data": {"result": "x", "is_error": True},
    }
    with open(path, "ab") as stream:
        stream.write(orjson.dumps(late) + b"\n")
    stats = session_stats(path)
    assert stats == _whole(path)
    assert (stats.runs[0].tool_calls, stats.runs[0].errors) == (1, 1)

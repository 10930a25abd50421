"""loopscribe._stats: the numbers of a session, from the same timeline the viewer draws."""

from __future__ import annotations

from pathlib import Path

from loopscribe import Execution, Session, Usage
from loopscribe import events as ev
from loopscribe._stats import session_stats

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

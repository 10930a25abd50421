"""`show` and `tail` print every message and every tool call with its result, of any session."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest

from loopscribe import read

from .test_cli import record_demo, run_cli

TRANSCRIPTS = Path(__file__).parent / "data" / "transcripts"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every shipped Claude Code and Codex transcript, imported, and a native session."""
    from loopscribe.cli import main

    out = tmp_path_factory.mktemp("imported")
    for agent in ("claude-code", "codex"):
        argv = ["import", agent, str(TRANSCRIPTS / agent), "--out", str(out / agent)]
        assert main([*argv, "--settle", "0"]) == 0
    record_demo(out / "native.jsonl")
    return sorted(p for p in out.rglob("*.jsonl") if not p.name.endswith(".otlp.jsonl"))


def test_show_prints_every_message_and_tool_call(
    imported: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each tool call's name, call ID and arguments and its result are shown, and no message
    heading is left empty (Claude Code's blank text blocks)."""
    monkeypatch.setenv("COLUMNS", "250")
    for path in imported:
        records = list(read(path))
        code, text, err = run_cli(capsys, "show", str(path), "-n", "0")
        assert (code, err) == (0, ""), path
        lines = text.splitlines()
        for before, after in itertools.pairwise(lines):
            assert not (before in ("assistant", "user") and not after.strip()), path
        starts = [r for r in records if r.type == "tool_exec_start" and r.execution]
        ends = [r for r in records if r.type == "tool_exec_end" and r.execution]
        for record in starts:
            assert record.execution is not None
            assert f"{record.data['tool']} {record.execution.id}" in text, (path, record.seq)
        for record in ends:
            assert record.execution is not None
            assert text.count(record.execution.id) >= 2, (path, record.seq)  # call and result
        code, out, _ = run_cli(capsys, "--json", "show", str(path), "-n", "0")
        shown = orjson.loads(out)
        said = [r for r in records if r.type == "message_end"]
        assert shown["transcript_total"] >= len(starts) + len(ends) // 2, path
        assert len([e for e in shown["transcript"] if e["role"] != "tool"]) <= len(said) + len(
            starts
        )
        if path.parent.name == "claude-code" and starts:
            assert "[tool call " in text


def test_a_result_without_evidence_is_shown_as_unknown(
    imported: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The Codex transcripts' redacted shell outputs are not errors: their outcome is unknown."""
    codex = [p for p in imported if p.parent.name == "codex"]
    errors = unknown = 0
    for path in codex:
        for record in read(path):
            if record.type == "tool_exec_end":
                errors += record.data.get("is_error") is True
                unknown += record.data.get("is_error") is None
        code, text, _ = run_cli(capsys, "show", str(path), "-n", "0")
        assert code == 0
        assert text.count("[tool error ") == sum(
            1 for r in read(path) if r.type == "tool_exec_end" and r.data.get("is_error") is True
        )
    assert unknown > errors
    assert errors <= 15


def test_tail_prints_what_each_record_says(
    imported: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`tail` gives a tool call's name, ID and arguments under its record line."""
    path = next(p for p in imported if p.name == "short.jsonl")
    code, text, _ = run_cli(capsys, "tail", str(path), "-n", "30")
    assert code == 0
    assert "[tool call Bash toolu_0116Hyi5v8ut7Ffb7d8qV1Sc]" in text
    assert "mix phx.server" in text

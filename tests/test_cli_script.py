"""A command line a script can rely on: names, exit statuses, help order, aliases."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from loopscribe.cli import NEWCOMER_ORDER, build_parser

from .test_cli import record_demo, run_cli


def test_help_lists_commands_in_newcomer_order(capsys: pytest.CaptureFixture[str]) -> None:
    """import, ls, show and serve come first; the plumbing (span, verify, ship) last."""
    code, text, _ = run_cli(capsys, "--help")
    assert code == 0
    listed = [
        line.split()[0]
        for line in text.splitlines()
        if line.startswith("    ") and line.split() and line.split()[0] in NEWCOMER_ORDER
    ]
    assert listed[:4] == ["import", "ls", "show", "serve"]
    assert listed == list(NEWCOMER_ORDER)


def test_one_name_for_the_polling_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """export, serve and ship all say --interval; the old names work but are not listed."""
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command in ("export", "serve", "ship"):
        shown = commands.choices[command].format_help()
        assert "--interval SECONDS" in shown, command
        assert "--poll-interval" not in shown
        assert "--sync-interval" not in shown
    args = parser.parse_args(["export", "x", "--poll-interval", "0.5"])
    assert args.interval == 0.5
    args = parser.parse_args(["serve", "--sync-interval", "3"])
    assert args.interval == 3.0
    session = record_demo(tmp_path / "s.jsonl")
    code, out, _ = run_cli(capsys, "--json", "ls", str(tmp_path))
    assert code == 0
    row = orjson.loads(out)
    assert row["session_id"] == row["id"] == session.id


def test_exit_statuses_are_as_documented(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Usage errors 2, not found 3, problems found 1, success 0."""
    session = record_demo(tmp_path / "s.jsonl")
    assert run_cli(capsys, "ls", "--no-such-option")[0] == 2
    assert run_cli(capsys, "find", str(tmp_path))[0] == 2  # neither a reference nor --trace-id
    assert run_cli(capsys, "show", str(tmp_path / "missing.jsonl"))[0] == 3
    assert run_cli(capsys, "verify", str(tmp_path / "s.jsonl"))[0] == 0  # unchained: reported
    assert run_cli(capsys, "--json", "show", session.id, "--dir", str(tmp_path))[0] == 0
    (tmp_path / "elsewhere").mkdir()
    damaged = tmp_path / "elsewhere" / "damaged.jsonl"
    damaged.write_bytes((tmp_path / "s.jsonl").read_bytes() + b'{"not": "a record"}\n')
    assert run_cli(capsys, "verify", str(damaged))[0] == 1  # a problem found
    code, _, err = run_cli(
        capsys, "report", str(tmp_path / "s.jsonl"), "-o", str(tmp_path / "no" / "r.html")
    )
    assert code == 3
    assert f"the folder {tmp_path / 'no'} does not exist" in err
    assert ".tmp" not in err


def test_tables_fit_80_columns_without_breaking_ids_or_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """import, ls, stats and export at 80 columns: every line fits, counts and short IDs
    are whole (names and paths are shortened with … instead of wrapped)."""
    monkeypatch.setenv("COLUMNS", "80")
    transcripts = Path(__file__).parent / "data" / "transcripts" / "claude-code"
    out = tmp_path / "out"
    code, imported, _ = run_cli(
        capsys, "import", "claude-code", str(transcripts), "--out", str(out), "--settle", "0"
    )
    assert code == 0
    reports = [
        orjson.loads(line) for line in run_cli(capsys, "--json", "ls", str(out))[1].splitlines()
    ]
    code, listed, _ = run_cli(capsys, "ls", str(out))
    assert code == 0
    session = next(
        r for r in reports if r["path"].endswith("4d5611e5-241a-462a-8d15-5122611a9569.jsonl")
    )
    code, stats, _ = run_cli(capsys, "stats", session["path"])
    assert code == 0
    code, exported, _ = run_cli(capsys, "export", session["path"])
    assert code == 0
    for text in (imported, listed, stats, exported):
        lines = [line for line in text.splitlines() if not line.startswith("imported into ")]
        assert all(len(line) <= 80 for line in lines), text
    assert " 807 " in imported  # the records of 4d5611e5, whole
    for row in reports:
        assert row["id"][:8] in listed
    assert "12.95M" in imported
    sent = [line for line in exported.splitlines() if "…" in line]
    assert sent
    assert " 341 " in sent[0] or "341" in sent[0].split()

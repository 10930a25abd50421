"""One sessions home, and one resolver for whatever form a session or record is named in."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from loopscribe import read, sessions_home
from loopscribe.otel import span_id, trace_id

from .test_cli import record_demo, run_cli

TRANSCRIPTS = Path(__file__).parent / "data" / "transcripts"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """LOOPSCRIBE_DIR set to an empty folder, the current folder elsewhere."""
    folder = tmp_path / "home"
    monkeypatch.setenv("LOOPSCRIBE_DIR", str(folder))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return folder


def test_the_sessions_home_is_loopscribe_dir_else_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LOOPSCRIBE_DIR wins; else $XDG_DATA_HOME/loopscribe; else ~/.local/share/loopscribe."""
    monkeypatch.setenv("LOOPSCRIBE_DIR", str(tmp_path / "x"))
    assert sessions_home() == tmp_path / "x"
    monkeypatch.delenv("LOOPSCRIBE_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "d"))
    assert sessions_home() == tmp_path / "d" / "loopscribe"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert sessions_home() == tmp_path / "h" / ".local" / "share" / "loopscribe"


def test_import_ls_and_show_meet_in_the_home(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import lands under the home; `ls` there shows short IDs; `show` takes a prefix of
    the loopscribe ID or of the agent's own transcript ID, from any folder."""
    code, _, err = run_cli(
        capsys, "import", "claude-code", str(TRANSCRIPTS / "claude-code"), "--settle", "0"
    )
    assert code == 0, err
    assert (home / "import" / "claude-code" / "short.jsonl").is_file()
    code, out, err = run_cli(capsys, "--json", "ls")
    assert (code, err) == (0, "")
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert len(rows) >= 7
    monkeypatch.setenv("COLUMNS", "80")
    code, table, _ = run_cli(capsys, "ls")
    assert code == 0
    for row in rows:
        assert row["id"][:8] in table  # short IDs, never folded mid-ID
    assert all(len(line) <= 80 for line in table.splitlines())
    first = rows[0]["id"]
    code, out, err = run_cli(capsys, "show", first[:10])
    assert code == 0, err
    code, out, err = run_cli(capsys, "--json", "show", "short")  # by its file's name
    assert code == 0, err
    assert orjson.loads(out)["summary"]["path"].endswith("/short.jsonl")
    # 4d5611e5-… is Claude Code's own ID of one transcript; its loopscribe ID differs.
    code, out, err = run_cli(capsys, "--json", "show", "4d5611e5")
    assert code == 0, err
    assert orjson.loads(out)["summary"]["path"].endswith(
        "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    )


def test_dir_is_accepted_before_and_after_the_command(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--dir` names the home for one command, before or after the command's name."""
    (tmp_path / "other").mkdir()
    session = record_demo(tmp_path / "other" / "s.jsonl")
    for argv in (
        ["--dir", str(tmp_path / "other"), "show", session.id[:8]],
        ["show", session.id[:8], "--dir", str(tmp_path / "other")],
        ["--dir", str(tmp_path / "other"), "--json", "ls"],
    ):
        code, out, err = run_cli(capsys, *argv)
        assert code == 0, (argv, err)
        assert session.id in out or session.id[:8] in out


def test_a_missing_session_exits_3_and_ls_takes_a_file(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not found is exit status 3 (usage 2, problems 1); `ls FILE` lists that one session."""
    code, _, err = run_cli(capsys, "show", "abcdef12")
    assert code == 3
    assert "no such folder" in err or "no session ID" in err
    code, _, _ = run_cli(capsys, "show")
    assert code == 2
    session = record_demo(tmp_path / "s.jsonl")
    code, out, err = run_cli(capsys, "--json", "ls", str(tmp_path / "s.jsonl"))
    assert code == 0, err
    assert orjson.loads(out)["id"] == session.id


def test_ls_never_walks_the_whole_home_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ls ~` or `ls /` is refused at once with where sessions are, not a minute-long walk."""
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run_cli(capsys, "ls", str(tmp_path))
    assert code == 1
    assert "home folder" in err
    assert "sessions home" in err
    code, _, err = run_cli(capsys, "find", "/", "--trace-id", "1" * 32)
    assert code == 1
    assert "whole file system" in err


def test_every_copied_reference_finds_its_record(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """find, show and tail take file:///…#seq=N, PATH#seq=N, a viewer link and
    TRACE_ID/SPAN_ID: what a span or the viewer gives to copy."""
    home.mkdir()
    session = record_demo(home / "s.jsonl")
    path = home / "s.jsonl"
    tool_end = next(r for r in read(path) if r.type == "tool_exec_end")
    assert tool_end.run_id is not None
    assert tool_end.execution is not None
    seq = tool_end.seq
    trace = trace_id(session.id, tool_end.run_id)
    span = span_id(session.id, tool_end.run_id, tool_end.execution.id, 1)
    refs = [
        f"{path.as_uri()}#seq={seq}",
        f"{path}#seq={seq}",
        f"http://127.0.0.1:8765/session/{session.id}/record/{seq}",
    ]
    for ref in refs:
        code, out, err = run_cli(capsys, "--json", "find", ref)
        assert code == 0, (ref, err)
        assert [orjson.loads(line)["seq"] for line in out.splitlines()] == [seq], ref
        assert "Traceback" not in err
    for ref in (
        f"{trace:032x}/{span:016x}",
        f"http://localhost:8765/trace/{trace:032x}/span/{span:016x}",
    ):
        code, out, err = run_cli(capsys, "--json", "find", ref)
        assert code == 0, (ref, err)
        assert seq in [orjson.loads(line)["seq"] for line in out.splitlines()]
    for command in ("show", "tail", "verify", "stats"):
        for ref in [*refs, f"{trace:032x}/{span:016x}"]:
            code, out, err = run_cli(capsys, "--json", command, ref)
            assert code == 0, (command, ref, err)
            assert session.id in out or str(path) in out, (command, ref)
    code, _, err = run_cli(capsys, "find", f"{path.as_uri()}#seq=999")
    assert code == 3
    assert "no record with seq 999" in err
    code, _, err = run_cli(capsys, "find", "http://127.0.0.1:8765/nowhere")
    assert code == 1
    assert "not a loopscribe viewer link" in err
    shutil.rmtree(home)
    code, _, err = run_cli(capsys, "find", f"{path.as_uri()}#seq=1")
    assert code == 3
    assert "Traceback" not in err


def test_the_claude_agent_sdk_store_defaults_to_the_home(home: Path) -> None:
    """The session store's default folder is in the sessions home, where `ls` looks."""
    from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

    with LoopscribeSessionStore() as store:
        assert store.directory == home / "claude-agent-sdk"
        assert store.directory.is_dir()


def test_hostile_references_are_refused_in_one_line(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reference to a file that is no session, a link with a path in place of an ID, a
    huge seq or a FIFO: one line, a non-zero status, nothing opened that should not be."""
    other = tmp_path / "notes.txt"
    other.write_text("secret notes\n")
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for ref in (
        f"{other.as_uri()}#seq=1",
        "http://127.0.0.1:8765/session/..%2f..%2fetc/record/1",
        "http://127.0.0.1:8765/session/abc/record/99999999999999999999999",
        f"{fifo}#seq=0",
        "0" * 32 + "/" + "0" * 16,
    ):
        for command in ("find", "show"):
            code, out, err = run_cli(capsys, command, ref)
            assert code in (1, 2, 3), (command, ref)
            assert "Traceback" not in err
            assert len(err.strip().splitlines()) == 1, err
            assert "secret notes" not in out + err

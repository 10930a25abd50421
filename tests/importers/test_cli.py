"""``loopscribe import claude-code|codex``: the summary, JSON lines, export and errors."""

from __future__ import annotations

import argparse
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from loopscribe import LoopscribeError
from loopscribe.cli import CliError, Out, build_parser, main
from loopscribe.cli._import import add_parsers, default_out

from ._support import copy_transcript, freshen, lines, records, transcripts

CLAUDE = transcripts("claude-code")
CODEX = transcripts("codex")


def _parser() -> argparse.ArgumentParser:
    """The loopscribe parser with the import command, as ``cli.build_parser`` hooks it in."""
    parser = argparse.ArgumentParser(prog="loopscribe")
    parser.add_argument("--json", action="store_true")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return parser


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``loopscribe`` in-process (through main() once the hook is in) and capture output."""
    if "import" in build_parser().format_help():
        code = main(list(argv))
    else:
        args = _parser().parse_args(argv)
        out = Out(Console(soft_wrap=True), Console(stderr=True, soft_wrap=True), args.json)
        handler: Callable[[argparse.Namespace, Out], int] = args.handler
        try:
            code = handler(args, out)
        except (CliError, LoopscribeError, OSError) as exc:  # as main() reports them
            out.stderr.print(f"loopscribe: error: {exc}", highlight=False)
            code = 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def claude_dir(tmp_path: Path) -> Path:
    """A project folder with three real Claude Code transcripts, one with subagents."""
    folder = tmp_path / "projects" / "-home-user-project"
    for path in CLAUDE:
        if path.stem.startswith("4d5611e5") or path.stem in ("short", "hello-world-script"):
            copy_transcript(path, folder)
    return tmp_path / "projects"


def test_import_prints_a_summary_and_then_nothing_new(
    claude_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The summary table lists sessions, records, tool calls, tokens and unknown types."""
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(
        capsys, "import", "claude-code", str(claude_dir), "--out", str(out), "--settle", "0"
    )
    assert code == 0, stderr
    assert "4d5611e5-241a-462a" in stdout
    assert "183/183" in stdout  # tool results/calls of the session with subagents
    assert "12.95M" in stdout  # its input tokens
    assert "3 of 3 transcripts had new lines" in stdout
    assert "system/stop_hook_summary x3" in stdout
    assert sorted(p.name for p in out.glob("*.jsonl")) == [
        "4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
        "hello-world-script.jsonl",
        "short.jsonl",
    ]
    code, stdout, _ = run_cli(
        capsys, "import", "claude-code", str(claude_dir), "--out", str(out), "--settle", "0"
    )
    assert code == 0
    assert "0 of 3 transcripts had new lines; 3 were up to date" in stdout


def test_import_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --json, each transcript's report is one JSON line."""
    folder = tmp_path / "sessions" / "2025" / "09" / "25"
    for path in CODEX:
        copy_transcript(path, folder)
    code, stdout, _ = run_cli(
        capsys,
        "--json",
        "import",
        "codex",
        str(tmp_path / "sessions"),
        "--out",
        str(tmp_path / "out"),
        "--settle",
        "0",
    )
    assert code == 0
    reports = [orjson.loads(line) for line in stdout.splitlines()]
    assert len(reports) == len(CODEX)
    for report in reports:
        source = Path(report["source"])
        kinds = Counter(str((o.get("payload") or o).get("type")) for o in lines(source))
        calls = kinds["function_call"] + kinds["custom_tool_call"] + kinds["local_shell_call"]
        outputs = kinds["function_call_output"] + kinds["custom_tool_call_output"]
        assert report["tool_calls"] == calls + kinds["web_search_call"]
        assert report["tool_results"] == outputs + kinds["web_search_call"]
        assert report["unpaired_calls"] == calls - outputs
        assert report["finished"] is True
        assert report["records"] == len(records(Path(report["destination"]))) - 1


def test_export_sends_each_span_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--export ships the new spans (here to the OTLP file beside the session), never twice."""
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_OTLP"):
            monkeypatch.delenv(name)
    source_dir = tmp_path / "src"
    source = freshen(copy_transcript(next(p for p in CLAUDE if p.stem == "short"), source_dir))
    data = source.read_bytes()
    half = sum(len(line) for line in data.splitlines(keepends=True)[:12])  # both results in
    source.write_bytes(data[:half])
    out = tmp_path / "out"
    argv = ["--json", "import", "claude-code", str(source_dir), "--out", str(out), "--export"]
    code, stdout, _ = run_cli(capsys, *argv, "--settle", "3600")
    assert code == 0
    first = orjson.loads(stdout)["export"]["sent"]
    assert first > 0  # the finished tool calls of the open turn
    with open(source, "ab") as stream:
        stream.write(data[half:])
    code, stdout, _ = run_cli(capsys, *argv, "--settle", "0")
    assert code == 0
    second = orjson.loads(stdout)["export"]["sent"]
    shipped = out / "short.jsonl.otlp.jsonl"
    names: list[tuple[str, str]] = []
    for line in shipped.read_bytes().splitlines():
        for rs in orjson.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                names.extend((s["spanId"], s["name"]) for s in ss["spans"])
    assert len(names) == first + second == len(set(names))
    assert "execute_tool Glob" in {n for _, n in names}
    assert any(n.startswith("invoke_agent") for _, n in names)


def test_a_missing_folder_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DIR that does not exist is named, with what to give instead."""
    code, _, stderr = run_cli(
        capsys, "import", "codex", str(tmp_path / "nope"), "--out", str(tmp_path)
    )
    assert code == 1
    assert "nope: no such file or folder; give the folder of your OpenAI Codex CLI" in stderr


def test_errors_of_one_transcript_do_not_stop_the_others(
    claude_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A transcript whose destination is in the way is reported; the rest are imported."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "short.jsonl").write_text("not mine\n")
    code, stdout, stderr = run_cli(
        capsys, "import", "claude-code", str(claude_dir), "--out", str(out), "--settle", "0"
    )
    assert code == 1
    assert "short.jsonl: exists, but has no import cursor" in stderr
    assert "2 of 3 transcripts had new lines" in stdout


def test_default_folders_follow_the_agents_and_xdg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Defaults: CLAUDE_CONFIG_DIR/projects, CODEX_HOME/sessions, XDG_DATA_HOME for output."""
    from loopscribe.importers import claude_code, codex

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "x"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "d"))
    assert claude_code.default_dir() == tmp_path / "c" / "projects"
    assert codex.default_dir() == tmp_path / "x" / "sessions"
    assert default_out("codex") == tmp_path / "d" / "loopscribe" / "import" / "codex"
    monkeypatch.setenv("LOOPSCRIBE_DIR", str(tmp_path / "home"))
    assert default_out("codex") == tmp_path / "home" / "import" / "codex"


def _claude(name: str) -> Path:
    return next(p for p in CLAUDE if p.stem == name)


def test_importing_the_wrong_agent_is_refused_with_what_to_do(
    claude_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`import codex` of Claude Code transcripts (and the reverse, and of loopscribe sessions)
    is refused naming what is there and the right command, and writes nothing."""
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(capsys, "import", "codex", str(claude_dir), "--out", str(out))
    assert (code, stdout) == (1, "")
    assert "holds no OpenAI Codex CLI transcripts but" in stderr
    assert "Claude Code transcript(s)" in stderr
    assert f"`loopscribe import claude-code {claude_dir}`" in stderr
    assert not out.exists()
    rollouts = tmp_path / "rollouts"
    for path in CODEX:
        copy_transcript(path, rollouts)
    code, _, stderr = run_cli(capsys, "import", "claude-code", str(rollouts), "--out", str(out))
    assert code == 1
    assert f"holds no Claude Code transcripts but {len(CODEX)} Codex rollout(s)" in stderr
    assert f"`loopscribe import codex {rollouts}`" in stderr
    single = sorted(rollouts.glob("*.jsonl"))[0]
    code, _, stderr = run_cli(capsys, "import", "claude-code", str(single), "--out", str(out))
    assert code == 1
    assert f"{single}: is not a Claude Code transcript" in stderr
    assert not out.exists()
    # Imported sessions are loopscribe sessions: importing them again is refused too.
    code, _, _ = run_cli(
        capsys, "import", "codex", str(rollouts), "--out", str(out), "--settle", "0"
    )
    assert code == 0
    code, _, stderr = run_cli(capsys, "import", "codex", str(out), "--out", str(tmp_path / "again"))
    assert code == 1
    assert "loopscribe session(s); loopscribe sessions need no import" in stderr
    assert not (tmp_path / "again").exists()


def test_imported_sessions_have_a_title_and_a_finished_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Claude Code `summary` entry titles the session, else the first user message
    (shortened, one line); status is `idle` for a finished transcript, `running` for one
    whose own last timestamp is recent (its turn is still open)."""
    source = tmp_path / "src"
    copy_transcript(_claude("hello-world-script"), source)
    summarized = source / "summarized.jsonl"
    summary = '{"type":"summary","summary":"Hello script, written and run","leafUuid":"x"}'
    with_summary = [summary, *_claude("short").read_text().splitlines()]
    summarized.write_text("\n".join(with_summary) + "\n")
    long_prompt = source / "long.jsonl"
    first = next(o for o in lines(_claude("python-to-rust-port")) if o.get("type") == "user")
    long_prompt.write_text(_claude("python-to-rust-port").read_text())
    out = tmp_path / "out"
    code, _, _ = run_cli(
        capsys, "import", "claude-code", str(source), "--out", str(out), "--settle", "0"
    )
    assert code == 0
    monkeypatch.setenv("COLUMNS", "200")
    code, stdout, _ = run_cli(capsys, "--json", "ls", str(out))
    titles = {Path(r["path"]).stem: r["title"] for r in map(orjson.loads, stdout.splitlines())}
    assert titles["summarized"] == "Hello script, written and run"
    hello = next(o for o in lines(_claude("hello-world-script")) if o.get("type") == "user")
    asked = " ".join(hello["message"]["content"].split())
    assert asked.startswith(titles["hello-world-script"].removesuffix("…"))
    assert len(titles["hello-world-script"]) > 40
    prompt = " ".join(str(first["message"]["content"]).split())
    assert len(prompt) > 80
    assert titles["long"].endswith("…")
    assert len(titles["long"]) <= 73
    assert prompt.startswith(titles["long"].removesuffix("…"))
    code, stdout, _ = run_cli(capsys, "--json", "ls", str(out))
    assert {orjson.loads(line)["status"] for line in stdout.splitlines()} == {"idle"}
    # A transcript still being written (its own last timestamp is recent) is `running`.
    for path in source.glob("*.jsonl"):
        freshen(path)
    code, _, _ = run_cli(
        capsys,
        "import",
        "claude-code",
        str(source),
        "--out",
        str(tmp_path / "live"),
        "--settle",
        "3600",
    )
    code, stdout, _ = run_cli(capsys, "--json", "ls", str(tmp_path / "live"))
    assert [orjson.loads(line)["status"] for line in stdout.splitlines()] == ["running"] * 3


def test_a_slash_command_titles_the_session_by_its_name_and_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session begun with a Claude Code slash command is titled `/name args`, not markup."""
    source = tmp_path / "src"
    for path in CLAUDE:
        if path.stem in ("subagent", "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"):
            copy_transcript(path, source)
    out = tmp_path / "out"
    assert (
        run_cli(capsys, "import", "claude-code", str(source), "--out", str(out), "--settle", "0")[0]
        == 0
    )
    _, stdout, _ = run_cli(capsys, "--json", "ls", str(out))
    titles = {Path(r["path"]).stem: r["title"] for r in map(orjson.loads, stdout.splitlines())}
    japanese = "/orchestrator @CLAUDE.md を最新の状態にアップデートしてください"
    assert titles == {
        "subagent": "/handgemacht:create-beads websearch to learn how to fastest setup…",
        "5c0375b4-57a5-4f26-b12d-d022ee4e51b7": japanese,
    }


def test_a_codex_session_is_titled_by_its_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Codex's IDE context before the request, and wrapped context items, give no title."""
    source = tmp_path / "src"
    for path in CODEX:
        copy_transcript(path, source)
    out = tmp_path / "out"
    assert (
        run_cli(capsys, "import", "codex", str(source), "--out", str(out), "--settle", "0")[0] == 0
    )
    _, stdout, _ = run_cli(capsys, "--json", "ls", str(out))
    titles = [orjson.loads(line)["title"] for line in stdout.splitlines()]
    assert len(titles) == len(CODEX)
    for title in titles:
        assert title
        assert not title.startswith(("<", "#"))
        assert "Context from my IDE" not in title


@pytest.mark.parametrize(
    "name",
    ["coverage-test-fix", "hello-world-script", "python-to-rust-port", "short", "tool_heavy"],
)
def test_a_finished_transcript_keeps_every_response_usage(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each response (one message id) is one model call with its last usage, the last
    response's included, in the import report and in `ls`."""
    usage: dict[str, dict[str, int]] = {}
    for obj in lines(_claude(name)):
        message = obj.get("message")
        if obj.get("type") == "assistant" and isinstance(message, dict) and message.get("usage"):
            usage[message["id"]] = message["usage"]
    out = tmp_path / "out"
    code, stdout, _ = run_cli(
        capsys,
        "--json",
        "import",
        "claude-code",
        str(_claude(name)),
        "--out",
        str(out),
        "--settle",
        "0",
    )
    assert code == 0
    report = orjson.loads(stdout)
    expected_out = sum(u["output_tokens"] for u in usage.values())
    assert (report["model_calls"], report["output_tokens"]) == (len(usage), expected_out)
    _, stdout, _ = run_cli(capsys, "--json", "ls", str(out))
    assert orjson.loads(stdout)["output_tokens"] == expected_out

"""The command line: span, find and export."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from loopscribe import AssistantMessage, Execution, Session, TextContent, UserMessage, read
from loopscribe import events as ev
from loopscribe.cli import main
from loopscribe.otel import run_span_id, span_id, trace_id

HOST_TRACEPARENT = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


def record_demo(path: Path, *, parent: str | None = None, turns: int = 2) -> Session:
    """Record a small session with model and tool calls."""
    with Session.create(path) as s, s.begin_run(parent=parent) as run:
        for t in range(turns):
            model = Execution(f"m{t}", "model")
            run.record(ev.model_exec_start(model, "demo-1"))
            run.record(ev.model_request(model, [UserMessage(f"BODY-question-{t}")]))
            reply = AssistantMessage((TextContent(f"BODY-answer-{t}"),), model="demo-1")
            run.record(ev.model_exec_end(model, message=reply))
            tool = Execution(f"call_{t}", "tool", parent_id=f"m{t}")
            run.record(ev.tool_exec_start(tool, "grep", {"pattern": f"BODY-args-{t}"}))
            run.record(ev.tool_exec_end(tool, "grep", f"BODY-output-{t}"))
    return s


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process and capture its output."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_span_prints_the_derived_ids_of_a_record(
    session_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loopscribe span FILE --seq N` prints the trace and span a record belongs to."""
    s = record_demo(session_path)
    records = list(read(session_path))
    tool_end = next(r for r in records if r.type == "tool_exec_end")
    assert tool_end.run_id is not None
    code, out, _ = run_cli(capsys, "--json", "span", str(session_path), "--seq", str(tool_end.seq))
    assert code == 0
    got = orjson.loads(out)
    assert got["trace_id"] == f"{trace_id(s.id, tool_end.run_id):032x}"
    assert got["span_id"] == f"{span_id(s.id, tool_end.run_id, 'call_0', 1):016x}"
    run_close = records[-1]
    code, out, _ = run_cli(capsys, "span", str(session_path), "--seq", str(run_close.seq))
    assert f"span_id  {run_span_id(s.id, tool_end.run_id):016x}" in out


def test_span_uses_the_host_trace_of_a_run_begun_inside_a_host_span(
    session_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run begun with a traceparent reports the host's trace ID."""
    record_demo(session_path, parent=HOST_TRACEPARENT)
    code, out, _ = run_cli(capsys, "--json", "span", str(session_path), "--seq", "3")
    assert code == 0
    assert orjson.loads(out)["trace_id"] == "ab" * 16


def test_span_errors_are_one_clear_line(
    session_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A seq that does not exist, or session_start, is reported with exit status 1."""
    record_demo(session_path)
    code, _, err = run_cli(capsys, "span", str(session_path), "--seq", "999")
    assert code == 1
    assert "no record with seq 999" in err
    code, _, err = run_cli(capsys, "span", str(session_path), "--seq", "0")
    assert code == 1
    assert "session_start" in err


def test_find_prints_the_records_behind_a_span_with_bodies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loopscribe find DIR --trace-id --span-id` resolves a span to exactly its records."""
    s = record_demo(tmp_path / "a.jsonl")
    (tmp_path / "sub").mkdir()
    record_demo(tmp_path / "sub" / "b.jsonl")  # another session: none of its records match
    (tmp_path / "notes.jsonl").write_text('{"not": "a session"}\n')
    run_id = next(r.run_id for r in read(tmp_path / "a.jsonl") if r.type == "run_start")
    assert run_id is not None
    trace = f"{trace_id(s.id, run_id):032x}"
    span = f"{span_id(s.id, run_id, 'call_1', 1):016x}"
    code, out, _ = run_cli(
        capsys, "--json", "find", str(tmp_path), "--trace-id", trace, "--span-id", span
    )
    assert code == 0
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [r["type"] for r in rows] == ["tool_exec_start", "tool_exec_end"]
    assert rows[1]["data"]["result"] == "BODY-output-1"
    assert rows[0]["file"] == str(tmp_path / "a.jsonl")
    code, out, _ = run_cli(capsys, "find", str(tmp_path), "--trace-id", trace, "--span-id", span)
    assert code == 0
    assert "BODY-args-1" in out
    assert "BODY-output-1" in out
    code, out, _ = run_cli(capsys, "--json", "find", str(tmp_path), "--trace-id", trace)
    assert len(out.splitlines()) == len(list(read(tmp_path / "a.jsonl"))) - 1


def test_find_reports_unknown_ids_and_bad_hex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown or malformed IDs fail with a message saying what was searched."""
    record_demo(tmp_path / "a.jsonl")
    code, _, err = run_cli(capsys, "find", str(tmp_path), "--trace-id", "1" * 32)
    assert code == 3  # not found
    assert "1 session files searched" in err
    code, _, err = run_cli(capsys, "find", str(tmp_path), "--trace-id", "xyz")
    assert code == 1
    assert "not hexadecimal" in err
    code, _, err = run_cli(capsys, "find", str(tmp_path / "missing"), "--trace-id", "1" * 32)
    assert code == 3
    assert "no such file or folder" in err


def otlp_lines(path: Path) -> list[dict[str, object]]:
    """The spans in an embedded OTLP JSON lines file."""
    spans: list[dict[str, object]] = []
    if not path.exists():
        return spans
    for line in path.read_bytes().splitlines():
        for rs in orjson.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                spans.extend(ss["spans"])
    return spans


def test_export_resumes_from_its_cursor_and_never_sends_twice(
    session_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exporting again sends nothing; exporting after growth sends only the new spans."""
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_OTLP"):
            monkeypatch.delenv(name)
    record_demo(session_path, turns=2)
    out_file = session_path.with_name(session_path.name + ".otlp.jsonl")
    code, out, _ = run_cli(capsys, "--json", "export", str(session_path))
    assert code == 0
    first = orjson.loads(out)
    assert first["sent"] == 5  # run + 2 model + 2 tool spans
    assert len(otlp_lines(out_file)) == 5
    code, out, _ = run_cli(capsys, "--json", "export", str(session_path))
    assert orjson.loads(out)["sent"] == 0
    assert orjson.loads(out)["skipped"] == 5
    with Session.open(session_path) as s, s.begin_run() as run:
        tool = Execution("late", "tool")
        run.record(ev.tool_exec_start(tool, "ls", {}))
        run.record(ev.tool_exec_end(tool, "ls", "x"))
    code, out, _ = run_cli(capsys, "--json", "export", str(session_path))
    assert orjson.loads(out)["sent"] == 2
    spans = otlp_lines(out_file)
    assert len(spans) == 7
    assert len({s["spanId"] for s in spans}) == 7


def test_export_follow_ships_spans_while_a_host_records(tmp_path: Path) -> None:
    """`export --follow` in a real process sends spans as they are written and stops on SIGTERM."""
    path = tmp_path / "live.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    s = Session.create(path)
    run = s.begin_run()
    exe = Path(sys.executable).with_name("loopscribe")
    with subprocess.Popen(
        [str(exe), "--json", "export", "--follow", "--poll-interval", "0.05", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as child:
        try:
            out_file = path.with_name(path.name + ".otlp.jsonl")
            for i in range(3):
                tool = Execution(f"call_{i}", "tool")
                run.record(ev.tool_exec_start(tool, "ls", {}))
                run.record(ev.tool_exec_end(tool, "ls", "x"))
                deadline = time.monotonic() + 10
                while len(otlp_lines(out_file)) < i + 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert len(otlp_lines(out_file)) == i + 1
            run.close()
            s.close()
            deadline = time.monotonic() + 10
            while len(otlp_lines(out_file)) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            child.send_signal(signal.SIGTERM)
            stdout, stderr = child.communicate(timeout=20)
        finally:
            child.kill()
    assert child.returncode == 0, stderr
    assert orjson.loads(stdout)["sent"] == 4
    assert len(otlp_lines(out_file)) == 4


def test_the_libraries_never_import_the_command_line() -> None:
    """Only the CLI package (and `python -m` entry points) import `loopscribe.cli`: no cycle."""
    import ast

    src = Path(__file__).parents[1] / "src" / "loopscribe"
    offenders = []
    for module in src.rglob("*.py"):
        relative = module.relative_to(src)
        if relative.parts[0] == "cli" or module.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                package = ["loopscribe", *relative.parent.parts]
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join(base + (node.module.split(".") if node.module else []))
                imported = [f"{target}.{alias.name}" for alias in node.names] + [target]
                if any(
                    name == "loopscribe.cli" or name.startswith("loopscribe.cli.")
                    for name in imported
                ):
                    offenders.append(f"{relative}:{node.lineno}")
            elif isinstance(node, ast.Import):
                offenders += [
                    f"{relative}:{node.lineno}"
                    for alias in node.names
                    if alias.name == "loopscribe.cli" or alias.name.startswith("loopscribe.cli.")
                ]
    assert not offenders
    assert not (src / "_cli.py").exists()
    # And at run time: importing every library package leaves the CLI unloaded.
    code = (
        "import sys, loopscribe, loopscribe.viewer, loopscribe.importers, loopscribe.workspace, "
        "loopscribe.importers.claude_code, loopscribe.importers.codex, loopscribe.viewer._report;"
        "print(sorted(m for m in sys.modules if m.startswith('loopscribe.cli')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- files, folders, IDs --------------------------------------------------------------

DATA = Path(__file__).parent / "data" / "transcripts"
CLAUDE_TRANSCRIPT = DATA / "claude-code" / "short.jsonl"
CODEX_ROLLOUT = sorted((DATA / "codex").glob("*.jsonl"))[0]


def workspace_tree(root: Path) -> dict[str, Session]:
    """Sessions in nested folders, with everything loopscribe writes beside them."""
    made: dict[str, Session] = {}
    for name in ("top.jsonl", "a/one.jsonl", "a/b/two.jsonl"):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        made[name] = record_demo(path, turns=1)
        time.sleep(0.002)  # distinct last activity
    assert main(["--json", "export", str(root)]) == 0  # span files and cursors beside them
    artifacts = root / "a" / f"{made['a/one.jsonl'].id}.artifacts"
    artifacts.mkdir()
    (artifacts / "log.jsonl").write_text('{"note": 1}\n')
    (root / "a" / "claude.jsonl").write_bytes(CLAUDE_TRANSCRIPT.read_bytes())
    return made


def test_ls_lists_sessions_in_subfolders_and_skips_what_is_not_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ls DIR` finds nested sessions (file, title, source, status, last activity), skipping
    span files, cursors, artifacts and transcripts without calling them damaged."""
    made = workspace_tree(tmp_path)
    capsys.readouterr()
    code, out, err = run_cli(capsys, "--json", "ls", str(tmp_path))
    assert code == 0
    assert err == ""
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [r["file"] for r in rows] == ["a/b/two.jsonl", "a/one.jsonl", "top.jsonl"]
    assert [r["id"] for r in rows] == [made[r["file"]].id for r in rows]
    assert {r["status"] for r in rows} == {"idle"}
    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = run_cli(capsys, "ls", str(tmp_path))
    assert (code, err) == (0, "")
    for header in ("id", "file", "title", "source", "status", "last activity"):
        assert header in out
    assert out.index("two.jsonl") < out.index("one.jsonl") < out.index("top.jsonl")
    for command in (["find", str(tmp_path), "--trace-id", "1" * 32], ["stats", str(tmp_path)]):
        code, _, err = run_cli(capsys, *command)
        assert "skipped" not in err
        assert "damaged" not in err


def test_a_folder_of_transcripts_says_to_import_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ls` of a folder holding only Claude Code transcripts names them and the import."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "t.jsonl").write_bytes(CLAUDE_TRANSCRIPT.read_bytes())
    code, _, err = run_cli(capsys, "ls", str(tmp_path))
    assert code == 1
    assert "1 Claude Code transcript(s)" in err
    assert f"`loopscribe import claude-code {tmp_path}`" in err


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            lambda p: p.write_bytes(CLAUDE_TRANSCRIPT.read_bytes()),
            "looks like a Claude Code transcript, not a loopscribe session; "
            "import it with `loopscribe import claude-code {path}`",
        ),
        (
            lambda p: p.write_bytes(CODEX_ROLLOUT.read_bytes()),
            "looks like an OpenAI Codex CLI transcript, not a loopscribe session; "
            "import it with `loopscribe import codex {path}`",
        ),
        (
            lambda p: p.write_text('{"a": 1}\n'),
            "is JSON, but not a loopscribe session (its first line is not a session_start record)",
        ),
        (lambda p: p.write_text("hello\n"), "is not a loopscribe session (not JSON lines)"),
        (lambda p: p.write_text(""), "is empty, not a loopscribe session"),
    ],
)
def test_a_file_that_is_not_a_session_is_named_for_what_it_is(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path], object],
    expected: str,
) -> None:
    """Every command taking one session answers a foreign file with what it is and what to do."""
    path = tmp_path / "x.jsonl"
    make(path)
    for command in (
        ["show", str(path)],
        ["tail", str(path)],
        ["verify", str(path)],
        ["span", str(path), "--seq", "1"],
        ["report", str(path), "-o", str(tmp_path / "r.html")],
        ["stats", str(path)],
        ["find", str(path), "--trace-id", "1" * 32],
    ):
        code, _, err = run_cli(capsys, *command)
        assert code == 1, command
        assert err == f"loopscribe: error: {path}: {expected.format(path=path)}\n", command


def test_a_span_file_names_its_session(
    session_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show x.jsonl.otlp.jsonl` says these are spans and which file is the session."""
    record_demo(session_path)
    assert main(["export", str(session_path)]) == 0
    spans = session_path.with_name(session_path.name + ".otlp.jsonl")
    code, _, err = run_cli(capsys, "show", str(spans))
    assert code == 1
    assert "holds exported spans (OTLP JSON lines), not a loopscribe session" in err
    assert f"its session is {session_path}" in err


def test_session_ids_and_unique_prefixes_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """show, tail, verify, span, export and report take an ID or unique prefix, found below
    --dir (default: the sessions home); an ambiguous or unknown prefix is a clear error."""
    made = workspace_tree(tmp_path)
    target = made["a/b/two.jsonl"]
    others = [s.id for s in made.values() if s is not target]
    prefix = next(
        target.id[:n] for n in range(1, 33) if all(not o.startswith(target.id[:n]) for o in others)
    )
    capsys.readouterr()
    for ident in (target.id, prefix):
        code, out, _ = run_cli(capsys, "show", ident, "--dir", str(tmp_path))
        assert code == 0
        assert out.startswith(target.id)
    _, by_path, _ = run_cli(capsys, "--json", "span", str(target.path), "--seq", "3")
    monkeypatch.setenv("LOOPSCRIBE_DIR", str(tmp_path))
    code, by_prefix, _ = run_cli(capsys, "--json", "span", prefix, "--seq", "3")
    assert (code, by_prefix) == (0, by_path)
    for command in (
        ["--json", "show", prefix],
        ["--json", "tail", prefix],
        ["--json", "report", prefix, "-o", str(tmp_path / "r.html")],
        ["--json", "stats", prefix],
        ["--json", "export", prefix],
    ):
        code, out, err = run_cli(capsys, *command)
        assert code == 0, (command, err)
        assert target.id in out or "two.jsonl" in out, command
    code, out, _ = run_cli(capsys, "--json", "verify", prefix)
    assert code == 0  # not chained: reported as such, not a failure
    assert orjson.loads(out)["file"].endswith("two.jsonl")
    code, _, err = run_cli(capsys, "show", "0" * 32)
    assert code == 3
    assert f"no such file, and no session ID starting with it in {tmp_path}" in err


def test_a_folder_named_like_a_prefix_does_not_hide_the_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a folder holding a sub-folder "a3", `show a3` is still the session starting "a3"."""
    session = record_demo(tmp_path / "s.jsonl", turns=1)
    prefix = session.id[:2]
    (tmp_path / prefix).mkdir()
    other = next(p for p in ("abc", "def") if not session.id.startswith(p))
    (tmp_path / other).mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOOPSCRIBE_DIR", str(tmp_path))
    capsys.readouterr()
    code, out, _ = run_cli(capsys, "show", prefix)
    assert code == 0
    assert out.startswith(session.id)
    code, _, err = run_cli(capsys, "show", other)
    assert code == 1
    assert "is a folder" in err


def test_an_ambiguous_prefix_lists_the_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prefix several sessions share is refused with their IDs."""
    sessions: list[Session] = []
    while True:  # two sessions whose IDs share the first digit
        sessions.append(record_demo(tmp_path / f"s{len(sessions)}.jsonl", turns=1))
        firsts = [s.id[0] for s in sessions]
        shared = next((c for c in firsts if firsts.count(c) > 1), None)
        if shared is not None:
            break
    code, _, err = run_cli(capsys, "show", shared, "--dir", str(tmp_path))
    assert code == 1
    assert f"{shared}: " in err
    assert "sessions start with it" in err
    assert "give more digits" in err


# -- flags, help, usage errors ----------------------------------------------------------


def test_global_flags_work_before_or_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ls DIR --json` is `--json ls DIR`; so are -v and nested commands (`import codex`)."""
    workspace_tree(tmp_path)
    capsys.readouterr()
    _, before, _ = run_cli(capsys, "--json", "ls", str(tmp_path))
    _, after, _ = run_cli(capsys, "ls", str(tmp_path), "--json", "-v")
    assert before == after
    assert len(after.splitlines()) == 3
    from loopscribe.cli import build_parser

    args = build_parser().parse_args(["import", "codex", "x", "--json"])
    assert args.json is True
    args = build_parser().parse_args(["--json", "import", "codex", "x"])
    assert args.json is True
    args = build_parser().parse_args(["import", "codex", "x"])
    assert (args.json, args.verbose) == (False, False)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`loopscribe --version` prints the installed version."""
    from importlib.metadata import version

    code, out, _ = run_cli(capsys, "--version")
    assert code == 0
    assert out == f"loopscribe {version('loopscribe')}\n"


def test_every_command_and_option_has_help_text() -> None:
    """No command or option is left undocumented in --help."""
    import argparse

    from loopscribe.cli import build_parser

    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {a.dest for a in action._choices_actions if a.help}
                for sub_name, sub in action.choices.items():
                    if sub_name not in helped:
                        missing.append(f"{name} {sub_name}")
                    if not sub.description:
                        missing.append(f"{name} {sub_name} (description)")
                    walk(sub, f"{name} {sub_name}")
            elif not action.help or action.help == argparse.SUPPRESS:
                listed = {a.dest for a in parser._actions if a.help and a.help != argparse.SUPPRESS}
                if action.dest not in listed:  # else a hidden old name of a listed option
                    missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "loopscribe")
    assert missing == []


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "--last", "-1", "x"],
        ["tail", "-n", "-3", "x"],
        ["stats", "x", "--top", "many"],
        ["serve", "x", "--port", "70000"],
        ["export", "x", "--poll-interval", "-1"],
        ["import", "codex", "--settle", "nan"],
        ["span", "x"],
        ["nonsense"],
        [],
    ],
)
def test_a_usage_error_is_one_line_and_exit_status_2(argv: list[str]) -> None:
    """The real `loopscribe` program: usage errors are one line on stderr, never a traceback."""
    exe = Path(sys.executable).with_name("loopscribe")
    done = subprocess.run([str(exe), *argv], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "error:" in done.stderr
    assert "--help" in done.stderr


# -- exporting over a glob ----------------------------------------------------------------


def test_exporting_twice_over_the_same_glob_works(tmp_path: Path) -> None:
    """`loopscribe export 'dir/*'` again: span files and cursors the glob names are skipped."""
    for name in ("a.jsonl", "b.jsonl"):
        record_demo(tmp_path / name, turns=1)
    exe = Path(sys.executable).with_name("loopscribe")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    runs = []
    for _ in range(2):
        done = subprocess.run(
            f"{exe} --json export {tmp_path}/*",
            shell=True,
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        runs.append([orjson.loads(line) for line in done.stdout.splitlines()])
    first, second = runs
    assert [Path(r["file"]).name for r in first] == ["a.jsonl", "b.jsonl"]
    assert [Path(r["file"]).name for r in second] == ["a.jsonl", "b.jsonl"]
    assert all(r["sent"] > 0 for r in first)
    assert [(r["sent"], r["skipped"]) for r in second] == [(0, r["sent"]) for r in first]


# -- show renders every message kind ------------------------------------------------------


def test_show_renders_every_message_kind(
    session_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """loopscribe's own types and the framework shapes older files hold all become readable
    lines: reasoning folded and marked (never its signature), tool calls and results named,
    no `?` line."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from pydantic_ai.messages import (
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    from loopscribe import FileContent, SystemMessage, ThinkingContent, ToolCall, ToolResultMessage
    from loopscribe.adapters.langchain import lower_message

    long_thought = "step " * 200
    pydantic = ModelMessagesTypeAdapter.dump_python(
        [
            ModelRequest(parts=[UserPromptPart("PA-question")]),
            ModelResponse(parts=[ToolCallPart("pa_tool", {"q": 1}, "pa_call"), TextPart("PA-ans")]),
            ModelRequest(parts=[ToolReturnPart("pa_tool", "PA-result", "pa_call")]),
        ],
        mode="json",
    )
    messages: list[object] = [
        SystemMessage("SYS-prompt"),
        UserMessage((TextContent("look at this"), FileContent(uri="file:///x.pdf", name="x.pdf"))),
        AssistantMessage(
            (
                ThinkingContent(long_thought, signature="SIG-NEVER-SHOWN"),
                ToolCall("c1", "grep", {"pattern": "LS-args"}),
            )
        ),
        ToolResultMessage("c1", "grep", (TextContent("LS-result"),)),
        {  # Claude Code, as Anthropic content blocks
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "CC-thought", "signature": "SIG-NEVER-SHOWN"},
                {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"cmd": "CC-ls"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "CC-out"}],
        },
        # Codex and the OpenAI Agents SDK: Responses items
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "CX-reason"}],
            "encrypted_content": "ENC-NEVER-SHOWN",
        },
        {"type": "reasoning", "summary": [], "encrypted_content": "ENC-NEVER-SHOWN"},
        {
            "type": "function_call",
            "call_id": "fc1",
            "name": "shell",
            "arguments": '{"c": "OA-args"}',
        },
        {"type": "function_call_output", "call_id": "fc1", "output": "OA-output"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "OA-text"}],
        },
        *pydantic,
        lower_message(HumanMessage("LC-human")),
        lower_message(
            AIMessage("", tool_calls=[{"name": "lc_tool", "args": {"a": "LC-args"}, "id": "l1"}])
        ),
        lower_message(ToolMessage("LC-tool-output", tool_call_id="l1")),
    ]
    with Session.create(session_path) as s, s.begin_run() as run:
        for message in messages:
            run.record(ev.message_end(None, message))
    code, out, _ = run_cli(capsys, "show", str(session_path), "--last", "100")
    assert code == 0
    assert "SIG-NEVER-SHOWN" not in out
    assert "ENC-NEVER-SHOWN" not in out
    lines = out.splitlines()
    assert not [line for line in lines if line.strip() in ("?", "[?]") or line.startswith("?")]
    for expected in (
        "SYS-prompt",
        "[file x.pdf file:///x.pdf]",
        '[tool call grep c1] {"pattern":"LS-args"}',
        "[tool result grep c1] LS-result",
        "[thinking] CC-thought",
        '[tool call Bash tu1] {"cmd":"CC-ls"}',
        "[tool result tu1] CC-out",
        "[reasoning] CX-reason",
        "[reasoning, encrypted]",
        '[tool call shell fc1] {"c": "OA-args"}',
        "[tool result fc1] OA-output",
        "OA-text",
        "PA-question",
        '[tool call pa_tool pa_call] {"q":1}',
        "PA-ans",
        "[tool result pa_tool pa_call] PA-result",
        "LC-human",
        '[tool call lc_tool l1] {"a":"LC-args"}',
        "[tool result l1] LC-tool-output",
    ):
        assert expected in lines, expected
    (thought,) = [line for line in lines if line.startswith("[thinking] step")]
    assert len(thought) < 400
    assert thought.endswith("more characters)")
    roles = [line for line in lines if line in ("user", "assistant", "system", "tool")]
    assert len(roles) == len(messages)


def test_ls_and_export_tables_fit_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long titles and deep paths wrap inside their column at 80 columns; export keeps the
    order the files were given."""
    deep = tmp_path / "a-rather-long-folder-name" / "and-another-one-below-it"
    deep.mkdir(parents=True)
    paths = []
    for name in ("z-last-by-name.jsonl", "a-first-by-name.jsonl"):
        path = deep / name
        with Session.create(path, metadata={"title": "a very long title " * 8}) as s:
            s.begin_run().close()
        paths.append(path)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(capsys, "ls", str(tmp_path))
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80, out
    code, out, _ = run_cli(capsys, "export", *map(str, paths))
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert out.index("z-last") < out.index("a-first")


def test_the_demo_gives_every_record_its_scripted_time_and_prints_commands(
    tmp_path: Path,
) -> None:
    """examples/quickstart.py (make demo): times rise with seq across the whole scripted
    session (checkpoints and run close too), and the commands it prints run as printed."""
    example = Path(__file__).parents[1] / "examples" / "quickstart.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    env["PATH"] = os.defpath  # loopscribe not on PATH: the demo names it by its path
    done = subprocess.run(
        [sys.executable, str(example), str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    )
    (path,) = [p for p in (tmp_path / "demo").glob("*.jsonl") if not p.name.endswith(".otlp.jsonl")]
    records = list(read(path))
    times = [r.ts for r in records]
    assert times == sorted(times)
    assert {r.type for r in records} >= {"checkpoint", "run_close", "retry_scheduled"}
    assert 2.0 < (times[-1] - times[0]).total_seconds() < 3.0  # the script's ~2.5 s
    commands = [line.strip() for line in done.stdout.splitlines() if "loopscribe " in line]
    commands = [c for c in commands if c.split()[0].endswith("loopscribe")]
    assert len(commands) >= 5
    spans = path.with_name(path.name + ".otlp.jsonl")
    sent = spans.read_bytes()
    assert sent.count(b'"spanId"') >= 8
    for command in commands:
        argv = command.split()
        assert Path(argv[0]).name == "loopscribe"
        ran = subprocess.run(
            argv, capture_output=True, text=True, check=False, cwd=tmp_path, env=env
        )
        assert ran.returncode == 0, (command, ran.stderr)
    assert spans.read_bytes() == sent  # `export` after the demo sent nothing again


def test_hostile_folders_neither_hide_sessions_nor_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session whose first line is longer than the sniff is still a session; a FIFO named
    *.jsonl is never opened; binary junk is skipped."""
    from loopscribe.cli._kinds import SNIFF_BYTES, file_kind

    with Session.create(tmp_path / "big.jsonl", metadata={"title": "T" * SNIFF_BYTES}) as big:
        big.begin_run().close()
    assert file_kind(big.path).session_id == big.id
    big.path.unlink()
    s = record_demo(tmp_path / "s.jsonl", turns=1)
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "junk.jsonl").write_bytes(os.urandom(4096))
    code, out, err = run_cli(capsys, "--json", "ls", str(tmp_path))
    assert (code, err) == (0, "")
    (row,) = [orjson.loads(line) for line in out.splitlines()]
    assert row["id"] == s.id
    code, out, _ = run_cli(capsys, "--json", "show", s.id[:10], "--dir", str(tmp_path))
    assert code == 0
    assert orjson.loads(out)["summary"]["id"] == s.id


# -- errors: one line, tracebacks with --debug -------------------------------------------

FAILING_LS = """
import logging, sys
from loopscribe.cli import _sessions, main

class BackendError(Exception):
    pass

def ls(args, out):
    try:
        raise ValueError("a step failed\\non two lines")
    except ValueError:
        logging.getLogger("loopscribe.store").exception("syncing %s", "s3://bucket")
    raise {error}

_sessions.cmd_ls = ls
sys.exit(main(sys.argv[1:]))
"""


def _failing_ls(error: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", FAILING_LS.format(error=error), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            'BackendError("endpoint unreachable\\nretries exhausted")',
            "BackendError: endpoint unreachable retries exhausted (not an error loopscribe knows;"
            " run the command again with --debug",
        ),
        ('OSError(28, "No space left on device", "/x/s.jsonl")', "No space left on device"),
        ('KeyError("runs")', "KeyError: 'runs'"),
    ],
)
def test_any_error_is_one_line_and_a_logged_one_has_no_traceback(error: str, expected: str) -> None:
    """Without --debug: the logged error and the one that ends the command, a line each."""
    done = _failing_ls(error, "ls", ".")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    logged, final = done.stderr.splitlines()
    assert logged == (
        "loopscribe: ERROR: syncing s3://bucket (ValueError: a step failed on two lines)"
    )
    assert final.startswith("loopscribe: error: ")
    assert expected in final


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_before_or_after_the_command_shows_the_tracebacks(where: str) -> None:
    """--debug prints the traceback of the error and of the logged one, then the same line."""
    argv = ["--debug", "ls", "."] if where == "before" else ["ls", ".", "--debug"]
    done = _failing_ls('KeyError("runs")', *argv)
    assert done.returncode == 1
    assert done.stderr.count("Traceback (most recent call last)") == 2
    assert "ValueError: a step failed\non two lines" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("loopscribe: error: KeyError: 'runs'")


def test_ls_names_the_files_and_folders_it_cannot_read(tmp_path: Path) -> None:
    """An unreadable session file and an unreadable subfolder are named on stderr, not hidden."""
    s = record_demo(tmp_path / "ok.jsonl", turns=1)
    locked = tmp_path / "locked.jsonl"
    record_demo(locked, turns=1)
    locked.chmod(0)
    closed = tmp_path / "closed"
    closed.mkdir()
    record_demo(closed / "inside.jsonl", turns=1)
    closed.chmod(0)
    from .scripted import held_to_file_modes

    try:
        done = subprocess.run(
            held_to_file_modes([sys.executable, "-m", "loopscribe", "--json", "ls", str(tmp_path)]),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        closed.chmod(0o700)
    assert done.returncode == 0, done.stderr
    assert [orjson.loads(line)["id"] for line in done.stdout.splitlines()] == [s.id]
    lines = sorted(done.stderr.splitlines())
    assert lines == [
        f"skipped {closed}: cannot read it (Permission denied); check its permissions",
        f"skipped {locked}: cannot read it (Permission denied); check its permissions",
    ]

"""The command line: span, find and export."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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
    assert code == 1
    assert "1 session files searched" in err
    code, _, err = run_cli(capsys, "find", str(tmp_path), "--trace-id", "xyz")
    assert code == 1
    assert "not hexadecimal" in err
    code, _, err = run_cli(capsys, "find", str(tmp_path / "missing"), "--trace-id", "1" * 32)
    assert code == 1
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

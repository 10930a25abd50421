"""`loopscribe serve|report|stats` on the command line: tables, --json, clear errors."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from loopscribe import Execution, Session
from loopscribe import events as ev
from loopscribe.cli import _viewer as viewer_cli
from loopscribe.cli._viewer import add_parsers, main

from .conftest import TOOL_OUTPUT, Demo


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the viewer's commands in-process and capture their output."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_parsers_hook_into_a_loopscribe_parser() -> None:
    """`add_parsers(sub)` is all `loopscribe.cli.build_parser` needs."""
    parser = argparse.ArgumentParser(prog="loopscribe")
    parser.add_argument("--json", action="store_true")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    serve = parser.parse_args(["serve", "sessions"])
    assert (serve.handler, serve.host, serve.port) == (viewer_cli.cmd_serve, "127.0.0.1", 8765)
    report = parser.parse_args(["report", "s.jsonl", "-o", "r.html", "--run", "a", "--run", "b"])
    assert (report.output, report.run, report.full) == ("r.html", ["a", "b"], False)
    stats = parser.parse_args(["--json", "stats", "a.jsonl", "dir", "--top", "3"])
    assert (stats.paths, stats.top, stats.json) == (["a.jsonl", "dir"], 3, True)


def test_stats_table(demo: Demo, capsys: pytest.CaptureFixture[str]) -> None:
    """Per session and run, in tables; no colour codes when stdout is not a terminal."""
    code, out, err = run_cli(capsys, "stats", str(demo.path.parent))
    assert code == 0, err
    assert "research demo" in out
    assert demo.run_id[:8] in out
    assert "tokens by model" in out
    assert "gpt-demo" in out
    assert "slowest executions" in out
    assert "chat gpt-demo" in out
    assert "\x1b[" not in out


def test_stats_json(demo: Demo, capsys: pytest.CaptureFixture[str]) -> None:
    """--json: one object per session, runs nested, every number of the issue."""
    code, out, _ = run_cli(capsys, "--json", "stats", str(demo.path), "--top", "3")
    assert code == 0
    (line,) = out.splitlines()
    stats = orjson.loads(line)
    assert stats["session_id"] == demo.session_id
    assert (stats["model_calls"], stats["tool_calls"], stats["errors"], stats["retries"]) == (
        4,
        3,
        2,
        1,
    )
    assert stats["tokens_by_model"] == [
        {
            "model": "gpt-demo",
            "calls": 4,
            "input_tokens": 3974,
            "output_tokens": 223,
            # A made-up model has no price: unknown, never 0 (docs/cost.md).
            "cost_usd": "unknown",
            "cost_unknown_calls": 3,
        }
    ]
    (run,) = stats["runs"]
    assert run["duration_us"] > 3_000_000
    slowest = [(s["execution_id"], s["attempt"]) for s in run["slowest"]]
    assert slowest == [("model_3", 1), ("model_2", 2), ("model_1", 1)]
    assert run["slowest"][0]["span_id"] == demo.span_hex("model_3")


def test_stats_skips_what_is_not_a_session(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stray files in a folder are skipped quietly, a damaged session is named, a stray file
    named on purpose is answered with what it is; with nothing readable the exit status is 1."""
    stray = demo.path.parent / "notes.jsonl"
    stray.write_text('{"a": 1}\n')
    damaged = demo.path.parent / "nested" / "damaged.jsonl"
    damaged.parent.mkdir()
    damaged.write_bytes(demo.path.read_bytes().split(b"\n")[0] + b"\n{not json\n")
    code, out, err = run_cli(capsys, "--json", "stats", str(demo.path.parent))
    assert code == 0
    assert len(out.splitlines()) == 1
    assert "notes.jsonl" not in err
    assert "skipped" in err
    assert "damaged.jsonl" in err
    code, _, err = run_cli(capsys, "stats", str(stray))
    assert code == 1
    assert "not a loopscribe session" in err
    code, _, err = run_cli(capsys, "stats", str(tmp_path / "missing"))
    assert code == 3  # not found
    assert "no such file" in err


def test_report_writes_one_html_file(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """-o names the file; without it the report lands here, named after the session file."""
    target = tmp_path / "report.html"
    code, out, err = run_cli(capsys, "report", str(demo.path), "-o", str(target))
    assert code == 0, err
    assert f"report written to {target}" in out
    assert TOOL_OUTPUT in target.read_text()
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(capsys, "--json", "report", str(demo.path))
    assert code == 0
    written = orjson.loads(out)
    assert written["report"] == "research.report.html"
    assert (tmp_path / "research.report.html").is_file()


def test_report_errors_are_one_clear_line(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown run, a missing file, or the session file as output: exit status 1."""
    code, _, err = run_cli(capsys, "report", str(demo.path), "--run", "nope", "-o", "x.html")
    assert code == 1
    assert f"no run nope (its runs: {demo.run_id})" in err
    code, _, err = run_cli(capsys, "report", str(tmp_path / "missing.jsonl"))
    assert (code, "no such file" in err) == (3, True)  # not found
    code, _, err = run_cli(capsys, "report", str(demo.path), "-o", str(demo.path))
    assert (code, "that is the session file" in err) == (1, True)
    # Into a folder that does not exist: that folder is named, not a temporary file.
    missing = tmp_path / "no-such-folder" / "r.html"
    code, _, err = run_cli(capsys, "report", str(demo.path), "-o", str(missing))
    assert code == 3  # not found
    assert f"the folder {missing.parent} does not exist" in err
    assert ".partial" not in err


def test_serve_without_the_extra_names_the_install_command(
    demo: Demo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Starlette and uvicorn, serve names the install command that works here:
    `pip install -e 'CHECKOUT[serve]'` from a clone, `pip install 'loopscribe[serve]'` else."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name in ("starlette", "uvicorn") else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    code, _, err = run_cli(capsys, "serve", str(demo.path.parent))
    assert code == 1
    # This test runs from a checkout installed in editable mode (make test does that).
    checkout = Path(__file__).parents[2]
    command = err.split("are not installed): ")[1].strip()
    assert command.endswith(f"pip install -e '{checkout}[serve]'")
    assert (checkout / "pyproject.toml").is_file()
    assert Path(command.split()[0]).name == "pip"
    assert Path(command.split()[0]).is_file()

    def not_installed(name: str) -> object:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    code, _, err = run_cli(capsys, "serve", str(demo.path.parent))
    assert code == 1
    assert err.rstrip().endswith("pip install 'loopscribe[serve]'")


def test_serve_refuses_a_missing_folder_and_a_busy_port(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both are one line on stderr, before anything listens."""
    code, _, err = run_cli(capsys, "serve", str(tmp_path / "nowhere"))
    assert code == 1
    assert "no such folder" in err
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run_cli(capsys, "serve", str(demo.path.parent), "--port", str(port))
    assert code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err
    assert not list(tmp_path.glob("nowhere*"))  # a read-only viewer creates nothing


def test_serve_turns_nagle_off_on_every_connection_it_accepts() -> None:
    """The listening socket says TCP, so asyncio (uvicorn's loop) sets TCP_NODELAY on each
    accepted connection; with Nagle on, each request after the first on a kept-alive
    connection waited for the browser's delayed ACK."""
    import asyncio
    import socket

    async def accepted_nodelay() -> int:
        sock = viewer_cli._listen("127.0.0.1", 0)
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Record(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Record, sock=sock)
        try:
            _reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            writer.close()
            return await asyncio.wait_for(seen, 10)
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted_nodelay()) != 0


def test_stats_ranks_what_has_a_duration_and_counts_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tools whose start and end share one instant (as imports record them) are counted,
    never listed as slowest with 0 µs."""
    from datetime import UTC, datetime, timedelta

    from loopscribe import Execution, Session
    from loopscribe import events as ev

    path = tmp_path / "s.jsonl"
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with Session.create(path) as session:
        run = session.begin_run(timestamp=t0)
        slow = Execution("slow", "tool")
        run.record(ev.tool_exec_start(slow, "build", {}, timestamp=t0))
        run.record(ev.tool_exec_end(slow, "build", "ok", timestamp=t0 + timedelta(seconds=2)))
        for i in range(3):
            instant = Execution(f"instant{i}", "tool")
            at = t0 + timedelta(seconds=3 + i)
            run.record(ev.tool_exec_start(instant, "read", {}, timestamp=at))
            run.record(ev.tool_exec_end(instant, "read", "ok", timestamp=at))
        run.close(timestamp=t0 + timedelta(seconds=6))
    code, out, _ = run_cli(capsys, "--json", "stats", str(path))
    assert code == 0
    (run_stats,) = orjson.loads(out)["runs"]
    assert run_stats["tool_calls"] == 4
    assert [s["execution_id"] for s in run_stats["slowest"]] == ["slow"]
    assert run_stats["untimed"] == 3
    code, out, _ = run_cli(capsys, "stats", str(path))
    assert "0 µs" not in out
    assert "3 execution(s) without a duration" in out


def test_stats_keeps_the_order_given_and_fits_80_columns(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions are shown in the order named; every line fits an 80-column terminal."""
    from .conftest import record_demo

    (tmp_path / "other").mkdir()
    other = record_demo(tmp_path / "other" / "z.jsonl", title="zeta " * 30)
    monkeypatch.setenv("COLUMNS", "80")
    for order in ([other.path, demo.path], [demo.path, other.path]):
        code, out, _ = run_cli(capsys, "--json", "stats", *map(str, order))
        assert code == 0
        assert [orjson.loads(line)["file"] for line in out.splitlines()] == list(map(str, order))
        code, out, _ = run_cli(capsys, "stats", *map(str, order))
        assert code == 0
        assert max(len(line) for line in out.splitlines()) <= 80, out
        ids = {other.path: other.session_id, demo.path: demo.session_id}
        firsts = [out.index(f"session {ids[p]}") for p in order]
        assert firsts == sorted(firsts)


def test_stats_table_ranks_the_slowest_across_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--top N: the session's N slowest executions over all its runs, not N per run."""
    path = tmp_path / "three-runs.jsonl"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with Session.create(path) as session:
        for number, seconds in enumerate((3, 1, 2)):
            with session.begin_run() as run:
                tool = Execution(f"tool_{number}", "tool")
                run.record(ev.tool_exec_start(tool, f"step{number}", timestamp=start))
                end = start + timedelta(seconds=seconds)
                run.record(ev.tool_exec_end(tool, f"step{number}", "ok", timestamp=end))
    code, out, err = run_cli(capsys, "stats", str(path), "--top", "2")
    assert code == 0, err
    slowest = out.split("slowest executions", 1)[1]
    assert "step0" in slowest
    assert "step2" in slowest
    assert "step1" not in slowest
    assert slowest.index("step0") < slowest.index("step2")

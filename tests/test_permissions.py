"""Every local file loopscribe creates that holds session content is 0600, every folder 0700.

One realistic scenario runs under umask 022 (which leaves files 0644 and
folders 0755 unless the creator says otherwise): a workspace created in a
folder that does not exist yet, a session recorded with the embedded OTLP
JSON default, an artifact, a rename through the side log while another
process holds the session, ``loopscribe export``, ``loopscribe import`` of
the shipped transcripts (into a new nested folder and into the default
one, once with ``--export``) and ``loopscribe report``. Then every file and
folder below the scenario's home is checked.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopscribe import AssistantMessage, Session, TextContent, UserMessage, Workspace
from loopscribe import events as ev
from loopscribe.otel import SpanBridge, default_processor

from .importers._support import DATA
from .scripted import scripted

HOLD = textwrap.dedent(
    """
    import sys
    from loopscribe import Session
    with Session.open(sys.argv[1]):
        print("ready", flush=True)
        sys.stdin.readline()
    """
)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common default umask, for this process and the commands it starts."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _cli(*argv: str, cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopscribe", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, (argv, done.stderr)


def _modes(home: Path) -> dict[str, str]:
    """Every file and folder below ``home`` (itself included) whose mode is not private."""
    wrong: dict[str, str] = {}
    for folder, dirs, files in os.walk(home):
        for name in [folder, *(os.path.join(folder, f) for f in files + dirs)]:
            st = os.lstat(name)
            want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            if stat.S_IMODE(st.st_mode) != want:
                wrong[os.path.relpath(name, home.parent)] = oct(stat.S_IMODE(st.st_mode))
    return wrong


def test_a_whole_scenario_leaves_only_private_files_and_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_022: None
) -> None:
    """Sessions, side logs, span files, cursors, artifacts, imports and reports: 0600 and 0700."""
    home = tmp_path / "home"
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "",
        "XDG_DATA_HOME": str(home / "data"),
    }
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)

    ws = Workspace(home / "work" / "sessions")  # created with its parents
    path = ws.path(secrets.token_hex(16))
    processor = default_processor(path)  # the embedded default: a file beside the session
    bridge = SpanBridge(processor, file_uri=str(path))
    with (
        Session.create(path, observers=[bridge], session_id=path.stem) as session,
        session.begin_run() as run,
    ):
        run.record(ev.message_end(None, UserMessage("Summarise the logs.")))
        run.record(ev.message_end(None, AssistantMessage((TextContent("All quiet."),))))
    processor.shutdown()
    assert path.with_name(path.name + ".otlp.jsonl").exists()
    ws.add_artifact(session.id, "summary.md", b"# All quiet\n")
    with scripted(HOLD, str(path)) as holder:
        ws.update(session.id, title="renamed while held")  # goes to the side log
        holder.go()
    assert path.with_name(path.name + ".meta").exists()

    _cli("export", str(path), cwd=home, env=env)
    assert path.with_name(path.name + ".export-cursor").exists()
    claude, codex = DATA / "claude-code", DATA / "codex"
    _cli("import", "claude-code", str(claude), "--out", str(home / "imports" / "cc"),
         "--settle", "0", cwd=home, env=env)  # fmt: skip
    _cli("import", "codex", str(codex), "--settle", "0", "--export", cwd=home, env=env)
    _cli("report", str(path), "-o", str(home / "work" / "report.html"), cwd=home, env=env)

    created = {p.relative_to(home).as_posix() for p in home.rglob("*")}
    for expected in (
        "work/sessions",
        "work/report.html",
        f"work/sessions/{session.id}.artifacts/summary.md",
        "imports/cc",
        "data/loopscribe/import/codex",
    ):
        assert expected in created
    assert any(name.endswith(".import-cursor") for name in created)
    assert any(name.startswith("data/") and name.endswith(".export-cursor") for name in created)
    assert _modes(home) == {}

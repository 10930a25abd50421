"""Every CLI command given a file that is not a session file: one line, exit 1, promptly.

FIFOs, ``/dev/zero``, directories, binary files, unreadable files and export
cursors of the wrong shape are given to the real ``loopscribe`` executable
in a subprocess with a timeout, so a hang, a ``MemoryError`` or a traceback
fails the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from loopscribe import Execution, Session
from loopscribe import events as ev

from ..scripted import held_to_file_modes

TIMEOUT_S = 30
MEMORY_LIMIT = "ulimit -v 2000000; "  # 2 GB: an endless line must fail fast, not swap


def _session(path: Path) -> Path:
    with Session.create(path) as session, session.begin_run() as run:
        tool = Execution("t1", "tool")
        run.record(ev.tool_exec_start(tool, "lookup", {}))
        run.record(ev.tool_exec_end(tool, "lookup", "ok"))
    return path


def _fifo(tmp: Path) -> Path:
    path = tmp / "pipe.jsonl"
    os.mkfifo(path)
    return path


def _directory(tmp: Path) -> Path:
    path = tmp / "dir.jsonl"
    path.mkdir()
    return path


def _binary(tmp: Path) -> Path:
    path = tmp / "binary.jsonl"
    path.write_bytes(bytes(range(256)) * 64)
    return path


def _zeros(tmp: Path) -> Path:
    path = tmp / "zeros.jsonl"
    with open(path, "wb") as f:
        f.truncate(3 * 2**30)  # sparse: 3 GiB of zeros, no line break
    return path


def _unreadable(tmp: Path) -> Path:
    path = _session(tmp / "locked.jsonl")
    path.chmod(0)
    return path


def _dev_zero(tmp: Path) -> Path:
    return Path("/dev/zero")


HOSTILE: dict[str, Callable[[Path], Path]] = {
    "fifo": _fifo,
    "directory": _directory,
    "binary": _binary,
    "sparse zeros": _zeros,
    "/dev/zero": _dev_zero,
    "unreadable": _unreadable,
}

COMMANDS: dict[str, list[str]] = {
    "show": ["show", "{}"],
    "tail": ["tail", "{}"],
    "verify": ["verify", "{}"],
    "export": ["export", "{}"],
    "report": ["report", "{}", "-o", "{out}"],
    "stats": ["stats", "{}"],
}


def _run(
    args: list[str], tmp: Path, *, as_plain_user: bool = False
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "loopscribe", *args]
    command = " ".join(f"'{a}'" for a in (held_to_file_modes(argv) if as_plain_user else argv))
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    return subprocess.run(
        ["bash", "-c", MEMORY_LIMIT + command],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=tmp,
        env=env,
    )


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_hostile_file_is_one_clear_line(tmp_path: Path, kind: str, command: str) -> None:
    """One line naming the file and the problem, exit status 1, no traceback, no hang."""
    unreadable = kind == "unreadable"
    path = HOSTILE[kind](tmp_path)
    args = [a.format(path, out=tmp_path / "r.html") for a in COMMANDS[command]]
    done = _run(args, tmp_path, as_plain_user=unreadable)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr
    assert "MemoryError" not in done.stderr
    # ``stats`` reads many files: a file it opened is named as skipped, then it says
    # none was readable.
    assert 1 <= len(lines) <= (2 if command == "stats" else 1), done.stderr
    assert str(path) in lines[0] or path.name in lines[0]
    problems = (
        "not a session",
        "not a loopscribe session",
        "no loopscribe sessions",  # commands that take folders: a folder without sessions
        "ermission",
        "no session",
        "is a folder",
    )
    assert any(problem in lines[0] for problem in problems), lines[0]


@pytest.mark.parametrize(
    "cursor",
    [b"[1, 2]", b'{"seq": "7"}', b'{"seq": -1}', b'{"session_id": 5}', b"\xff\xfe", b"null"],
)
def test_an_export_cursor_of_the_wrong_shape_is_one_clear_line(
    tmp_path: Path, cursor: bytes
) -> None:
    """A cursor that is not ``{session_id, seq, offset}``: one line that says how to fix it."""
    path = _session(tmp_path / "s.jsonl")
    (tmp_path / "s.jsonl.export-cursor").write_bytes(cursor)
    done = _run(["export", str(path)], tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "export-cursor" in lines[0]
    assert "delete it" in lines[0]


@pytest.mark.parametrize("change", ["rename over", "delete"])
def test_tail_follow_notices_a_replaced_or_deleted_file(tmp_path: Path, change: str) -> None:
    """``tail -f`` stops within seconds with one line saying the file was replaced or deleted."""
    path = _session(tmp_path / "s.jsonl")
    with subprocess.Popen(  # the context closes the pipes, also when the test fails
        [sys.executable, "-m", "loopscribe", "tail", "-f", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            process.stdout.readline()  # following now: the records so far were printed
            if change == "delete":
                path.unlink()
            else:
                _session(tmp_path / "other.jsonl").rename(path)
            _, err = process.communicate(timeout=15)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 1, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert ("deleted" if change == "delete" else "replaced") in lines[0]

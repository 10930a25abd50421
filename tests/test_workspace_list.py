"""Warm ``Workspace.list()``: what changes between two lists is always seen.

A warm list reuses the folder's last listing while the folder's mtime shows
that no file was created, removed or renamed, and an unchanged file's
summary while its status cannot change. A listing is reused only once the
folder's mtime and ctime are two seconds old; these tests lift that wait
(``settled`` fixture) and make the folder's mtime old instead, as in any
workspace that was not touched for a while, so that every change they make
moves it. Then they change the folder or a file the way users do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loopscribe import Session, UserMessage, Workspace, workspace
from loopscribe import events as ev

_LONG_AGO_NS = 3_600 * 1_000_000_000


@pytest.fixture(autouse=True)
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reuse a folder listing without waiting for the folder's times to be 2 s old."""
    monkeypatch.setattr(workspace, "_FOLDER_TRUST_NS", -_LONG_AGO_NS)


def age_folder(folder: Path) -> None:
    """Set the folder's mtime an hour back, so a listing of it may be reused."""
    st = folder.stat()
    os.utime(folder, ns=(st.st_atime_ns, st.st_mtime_ns - _LONG_AGO_NS))


def record_session(ws: Workspace, title: str) -> str:
    """A small finished session with one user message; its ID."""
    with ws.create(title=title) as session, session.begin_run() as run:
        run.record(ev.message_end(None, UserMessage(f"hello from {title}")))
    return session.id


def titles(ws: Workspace) -> list[str | None]:
    """The listed sessions' titles, sorted."""
    return sorted((s.title for s in ws.list()), key=str)


def test_a_session_created_after_a_warm_list_is_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating a file moves the folder's mtime, so the next list scans the folder again."""
    ws = Workspace(tmp_path)
    for n in range(3):
        record_session(ws, f"s{n}")
    age_folder(tmp_path)
    scans: list[object] = []
    scandir = os.scandir

    def counted(folder: object) -> object:
        scans.append(folder)
        return scandir(folder)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "scandir", counted)
    assert titles(ws) == ["s0", "s1", "s2"]
    assert titles(ws) == ["s0", "s1", "s2"]
    assert len(scans) == 1  # the second list reused the listing
    record_session(ws, "s3")
    assert titles(ws) == ["s0", "s1", "s2", "s3"]
    assert len(scans) == 2
    assert Workspace(tmp_path).list() == ws.list()


def test_a_session_deleted_or_emptied_after_a_warm_list_is_gone(tmp_path: Path) -> None:
    """A removed file and a file truncated to nothing (the folder unchanged) leave the list."""
    ws = Workspace(tmp_path)
    ids = [record_session(ws, f"s{n}") for n in range(3)]
    age_folder(tmp_path)
    assert titles(ws) == ["s0", "s1", "s2"]
    ws.delete(ids[0])
    assert titles(ws) == ["s1", "s2"]
    age_folder(tmp_path)
    assert titles(ws) == ["s1", "s2"]
    os.truncate(ws.path(ids[1]), 0)  # no change to the folder itself
    assert titles(ws) == ["s2"]


def test_a_file_that_grew_or_was_replaced_is_read_again(tmp_path: Path) -> None:
    """Appending to a session or replacing its file shows in the next warm list."""
    ws = Workspace(tmp_path)
    first = record_session(ws, "first")
    second = record_session(ws, "second")
    age_folder(tmp_path)
    assert {s.id: s.message_count for s in ws.list()} == {first: 1, second: 1}
    with Session.open(ws.path(first)) as session, session.begin_run() as run:
        run.record(ev.message_end(None, UserMessage("again")))
    age_folder(tmp_path)
    read_before = ws.files_read
    assert {s.id: s.message_count for s in ws.list()} == {first: 2, second: 1}
    assert ws.files_read == read_before + 1
    # Replaced under the same name (a restore from a backup): another inode.
    backup = tmp_path / "backup.bin"
    other = Workspace(tmp_path / "elsewhere")
    source = record_session(other, "restored")
    backup.write_bytes(other.path(source).read_bytes().replace(source.encode(), second.encode()))
    os.replace(backup, ws.path(second))
    age_folder(tmp_path)
    assert {s.id: s.title for s in ws.list()} == {first: "first", second: "restored"}


def test_a_writer_that_dies_turns_its_session_interrupted_without_any_file_change(
    tmp_path: Path,
) -> None:
    """The status of a session with an open run is worked out on every list."""
    ws = Workspace(tmp_path)
    record_session(ws, "done")
    script = textwrap.dedent(
        f"""
        import sys, time
        from loopscribe import Execution, Workspace
        from loopscribe import events as ev
        ws = Workspace({str(tmp_path)!r})
        session = ws.create(title="live")
        run = session.begin_run()
        run.record(ev.turn_start(Execution("t1", "turn"), 1))
        print(session.id, run.id, flush=True)
        time.sleep(60)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    ) as child:
        try:
            assert child.stdout is not None
            live, run_id = child.stdout.readline().split()
            age_folder(tmp_path)
            assert {s.id: s.status for s in ws.list()}[live] == "running"
            size = ws.path(live).stat().st_size
            assert {s.id: s.status for s in ws.list()}[live] == "running"
        finally:
            child.kill()
    assert ws.path(live).stat().st_size == size
    deadline = time.monotonic() + 10
    while {s.id: s.status for s in ws.list()}[live] != "interrupted":
        assert time.monotonic() < deadline, "a dead writer's session stayed running"
        time.sleep(0.05)
    assert [{s.id: s.status for s in ws.list()}[live] for _ in range(3)] == ["interrupted"] * 3
    # Another process resumes the run: the record it writes makes the session running again.
    resume = textwrap.dedent(
        f"""
        import time
        from loopscribe import Session
        session = Session.open({str(ws.path(live))!r})
        session.resume_run({run_id!r})
        print("resumed", flush=True)
        time.sleep(60)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", resume], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "resumed"
            assert {s.id: s.status for s in ws.list()}[live] == "running"
        finally:
            child.kill()


def test_a_detached_run_is_interrupted_until_it_is_resumed(tmp_path: Path) -> None:
    """Detaching writes nothing, resuming does: the status follows both, list after list."""
    ws = Workspace(tmp_path)
    session = ws.create(title="paused")
    run = session.begin_run()
    run.record(ev.message_end(None, UserMessage("hello")))
    age_folder(tmp_path)
    assert [s.status for s in ws.list()] == ["running"]
    run.detach()
    assert [[s.status for s in ws.list()] for _ in range(3)] == [["interrupted"]] * 3
    resumed = session.resume_run(run.id)
    assert [s.status for s in ws.list()] == ["running"]
    resumed.close()
    assert [[s.status for s in ws.list()] for _ in range(2)] == [["idle"]] * 2
    session.close()

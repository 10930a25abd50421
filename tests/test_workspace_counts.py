"""``messages(last=N)`` totals from the file's end: the counts the writer carries in its lines.

Each case checks the page's ``total`` and ``messages_total`` against a
Workspace that folds every record, and that a fresh Workspace got them
without counting the whole file (the byte count is replaced by one that
fails the test) and read only about the page's bytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopscribe import (
    AssistantMessage,
    Execution,
    Session,
    SystemMessage,
    TextContent,
    UserMessage,
    Workspace,
    _backread,
    read,
)
from loopscribe import events as ev
from loopscribe import workspace as workspace_module
from loopscribe.workspace import MessagePage

from .scripted import scripted

PAD = "x" * 2000  # about 2 KiB a message: a few hundred messages make a file of a MiB


def exchange(run: Any, t: int) -> None:
    """Commit one user message and one reply in ``run``."""
    run.record(ev.message_end(None, UserMessage(f"question {t} {PAD}")))
    model = Execution(f"m{t}", "model")
    run.record(ev.message_end(model, AssistantMessage((TextContent(f"answer {t}"),))))


def text_of(message: object) -> str:
    """The first word pair of a user, system or assistant message."""
    if isinstance(message, UserMessage | SystemMessage):
        return " ".join(str(message.content).split()[:2])
    assert isinstance(message, AssistantMessage)
    return message.text


class _Counting(_backread.FileSource):
    """A session file read by range, counting the bytes read."""

    read_bytes = 0

    def pread(self, size: int, offset: int) -> bytes:
        out = super().pread(size, offset)
        _Counting.read_bytes += len(out)
        return out


class CountingWorkspace(Workspace):
    """A Workspace that counts the bytes its pages read from session files."""

    def _open_source(self, path: Path) -> _backread.ByteSource:
        return _Counting(path)


@pytest.fixture
def no_scan(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Make counting a whole file fail the test; yields the files that were counted."""
    counted: list[Path] = []

    def refuse(path: Path, *_args: object) -> tuple[int, int]:
        counted.append(path)
        raise AssertionError(f"{path}: the whole file was counted for the total")

    monkeypatch.setattr(workspace_module, "count_visible", refuse)
    return counted


def fresh_page(root: Path, sid: str, last: int, skip: int = 0) -> tuple[MessagePage, int]:
    """A page from a new Workspace and the bytes it read."""
    _Counting.read_bytes = 0
    page = CountingWorkspace(root).messages(sid, last=last, skip=skip)
    return page, _Counting.read_bytes


def folded(root: Path, sid: str) -> tuple[int, int]:
    """Visible and committed message counts from a Workspace that folds every record."""
    summary = Workspace(root).get(sid)
    return summary.message_count, summary.messages_total


def test_a_fresh_workspace_reads_the_total_at_the_end(tmp_path: Path, no_scan: list[Path]) -> None:
    """A 1 MiB session: the total comes with the page, reading about the page's bytes."""
    ws = Workspace(tmp_path)
    with ws.create() as s:
        for r in range(5):
            with s.begin_run() as run:
                for t in range(r * 100, r * 100 + 100):
                    exchange(run, t)
    size = ws.path(s.id).stat().st_size
    assert size > 1 << 20
    page, read_bytes = fresh_page(tmp_path, s.id, last=10)
    assert (page.total, page.messages_total) == folded(tmp_path, s.id) == (1000, 1000)
    assert [text_of(m) for m in page.messages][-2:] == ["question 499", "answer 499"]
    assert page.has_more
    assert read_bytes < 200_000  # the page spans ~13 KiB, read in 64 KiB blocks
    older = CountingWorkspace(tmp_path).messages(s.id, last=10, skip=980)
    assert (older.total, older.messages_total) == (1000, 1000)
    assert [text_of(m) for m in older.messages][:2] == ["question 5", "answer 5"]
    empty = Workspace(tmp_path).messages(s.id, last=0)
    assert (empty.messages, empty.total, empty.has_more) == ([], 1000, True)
    assert no_scan == []


CRASHING_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from loopscribe import Execution, Session, UserMessage, AssistantMessage, TextContent
    from loopscribe import events as ev
    s = Session.open(sys.argv[1])
    run = s.begin_run()
    for t in range(int(sys.argv[2]), int(sys.argv[3])):
        run.record(ev.message_end(None, UserMessage(f"question {t} " + "x" * 2000)))
        m = Execution(f"m{t}", "model")
        run.record(ev.message_end(m, AssistantMessage((TextContent(f"answer {t}"),))))
    # Half a message_end line, as a write cut by the crash leaves it.
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
    os.write(fd, b'{"session_id":"' + s.id.encode() + b'","seq":')
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def crash_writing(path: Path, first: int, stop: int) -> None:
    """Record exchanges ``first``..``stop - 1`` in another process, then SIGKILL it mid-run."""
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, str(path), str(first), str(stop)],
        check=False,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL


def test_a_crashed_writer_leaves_counts_a_reader_can_use(
    tmp_path: Path, no_scan: list[Path]
) -> None:
    """No run_close and a torn last line; then a new writer continues the count."""
    ws = Workspace(tmp_path)
    with ws.create() as s:
        pass
    path = ws.path(s.id)
    crash_writing(path, 0, 40)
    assert ws.status(s.id) == "interrupted"
    page, _ = fresh_page(tmp_path, s.id, last=4)
    assert (page.total, page.messages_total) == folded(tmp_path, s.id) == (80, 80)
    assert [text_of(m) for m in page.messages] == [
        "question 38",
        "answer 38",
        "question 39",
        "answer 39",
    ]
    crash_writing(path, 40, 60)  # reopened (the torn line removed), crashed again
    page, _ = fresh_page(tmp_path, s.id, last=4)
    assert (page.total, page.messages_total) == folded(tmp_path, s.id) == (120, 120)
    with Session.open(path) as again, again.begin_run() as run:
        exchange(run, 60)
    page, _ = fresh_page(tmp_path, s.id, last=1)
    assert (page.total, page.messages_total) == (122, 122)
    assert sum(r.type == "message_end" for r in read(path)) == 122
    assert no_scan == []


def test_compaction_with_keep_last_far_before_the_page(tmp_path: Path, no_scan: list[Path]) -> None:
    """The total says what a reader sees, the committed count everything, the page unchanged."""
    ws = Workspace(tmp_path)
    with ws.create() as s, s.begin_run() as run:
        for t in range(10):
            exchange(run, t)
    ws.compact(s.id, "summary of 0-9", keep_last=3)
    with Session.open(ws.path(s.id)) as again, again.begin_run() as run:
        for t in range(10, 60):
            exchange(run, t)
    expected = folded(tmp_path, s.id)
    assert expected == (1 + 3 + 100, 120)
    page, _ = fresh_page(tmp_path, s.id, last=6)  # the compaction is far back
    assert (page.total, page.messages_total) == expected
    assert [text_of(m) for m in page.messages][-1] == "answer 59"
    everything = Workspace(tmp_path).messages(s.id, last=1000)
    assert (everything.total, everything.messages_total) == expected
    assert [text_of(m) for m in everything.messages][:5] == [
        "summary of",
        "answer 8",
        "question 9",
        "answer 9",
        "question 10",
    ]
    assert len(everything.messages) == expected[0]
    # A later compaction replaces it, and keep_last beyond the messages keeps them all.
    ws.compact(s.id, "everything", keep_last=500)
    page, _ = fresh_page(tmp_path, s.id, last=2)
    assert (page.total, page.messages_total) == folded(tmp_path, s.id) == (1 + 120, 120)
    with Session.open(ws.path(s.id)) as again, again.begin_run() as run:
        exchange(run, 60)
    page, _ = fresh_page(tmp_path, s.id, last=2)
    assert (page.total, page.messages_total) == folded(tmp_path, s.id) == (1 + 122, 122)
    ws.compact(s.id, "nothing kept")
    page, _ = fresh_page(tmp_path, s.id, last=2)
    assert [text_of(m) for m in page.messages] == ["nothing kept"]
    assert (page.total, page.messages_total) == folded(tmp_path, s.id) == (1, 122)
    assert no_scan == []


AGENT = textwrap.dedent(
    """
    import sys
    from loopscribe import Execution, Session, UserMessage, AssistantMessage, TextContent
    from loopscribe import events as ev
    s = Session.open(sys.argv[1])
    def exchanges(run, first, stop):
        for t in range(first, stop):
            run.record(ev.message_end(None, UserMessage(f"question {t} " + "x" * 2000)))
            m = Execution(f"m{t}", "model")
            run.record(ev.message_end(m, AssistantMessage((TextContent(f"answer {t}"),))))
    with s.begin_run() as run:
        exchanges(run, 0, 20)
    print("ready", flush=True)
    sys.stdin.readline()  # the UI process compacts through the side log meanwhile
    with s.begin_run() as run:
        exchanges(run, 20, 50)
    print("more", flush=True)
    sys.stdin.readline()
    s.close()
    """
)


def test_a_side_log_compaction_from_another_process(tmp_path: Path, no_scan: list[Path]) -> None:
    """While an agent process writes, a UI compacts; the totals still come from the end."""
    ws = Workspace(tmp_path)
    with ws.create() as s:
        pass
    path = ws.path(s.id)
    with scripted(AGENT, str(path)) as agent:
        summary = ws.compact(s.id, "the first twenty", keep_last=4)
        assert (summary.message_count, summary.messages_total) == (5, 40)
        assert path.with_name(path.name + ".meta").exists()  # the writer kept its file
        agent.go()
        assert agent.said() == "more"
        expected = folded(tmp_path, s.id)
        assert expected == (1 + 4 + 60, 100)
        page, _ = fresh_page(tmp_path, s.id, last=6)  # the side compaction is far back
        assert (page.total, page.messages_total) == expected
        near = Workspace(tmp_path).messages(s.id, last=70)  # reaches the summary
        assert (near.total, near.messages_total) == expected
        assert [text_of(m) for m in near.messages][:2] == ["the first", "question 18"]
        agent.go()
        assert agent.process.wait(timeout=30) == 0
    # Nobody writes now: a compaction in the file is newer than the side log's.
    ws.compact(s.id, "all of it", keep_last=1)
    with Session.open(path) as again, again.begin_run() as run:
        for t in range(50, 60):
            exchange(run, t)
    page, _ = fresh_page(tmp_path, s.id, last=3)
    assert (page.total, page.messages_total) == folded(tmp_path, s.id) == (1 + 1 + 20, 120)
    assert no_scan == []


RESUMING_WRITER = textwrap.dedent(
    """
    import sys
    from loopscribe import Execution, Session, UserMessage, AssistantMessage, TextContent
    from loopscribe import events as ev
    s = Session.open(sys.argv[1])
    mode, first, stop = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    run = s.begin_run() if mode == "new" else s.resume_run(mode)
    for t in range(first, stop):
        run.record(ev.message_end(None, UserMessage(f"question {t}")))
        m = Execution(f"m{t}", "model")
        run.record(ev.message_end(m, AssistantMessage((TextContent(f"answer {t}"),))))
    if mode == "new":
        run.detach()
        print(run.id)
    else:
        run.close()
    s.close()
    """
)


def test_a_run_resumed_by_another_process_continues_the_count(
    tmp_path: Path, no_scan: list[Path]
) -> None:
    """Detached in one process, resumed in the next: one run, one running count."""
    ws = Workspace(tmp_path)
    with ws.create() as s:
        pass
    path = ws.path(s.id)
    first = subprocess.run(
        [sys.executable, "-c", RESUMING_WRITER, str(path), "new", "0", "30"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    run_id = first.stdout.strip()
    page, _ = fresh_page(tmp_path, s.id, last=2)
    assert (page.total, page.messages_total) == (60, 60)
    subprocess.run(
        [sys.executable, "-c", RESUMING_WRITER, str(path), run_id, "30", "60"],
        check=True,
        timeout=60,
    )
    records = list(read(path))
    assert [r.type for r in records].count("run_resume") == 1
    assert {r.run_id for r in records if r.type == "message_end"} == {run_id}
    page, _ = fresh_page(tmp_path, s.id, last=2)
    assert (page.total, page.messages_total) == folded(tmp_path, s.id) == (120, 120)
    assert [text_of(m) for m in page.messages] == ["question 59", "answer 59"]
    assert no_scan == []


def strip_counts(path: Path) -> None:
    """Rewrite ``path`` as a writer before the counts did: the same lines, without them."""
    lines = []
    for raw in path.read_bytes().splitlines():
        obj = orjson.loads(raw)
        obj.pop("messages", None)
        obj.pop("compaction", None)
        lines.append(orjson.dumps(obj) + b"\n")
    path.write_bytes(b"".join(lines))


def test_an_older_file_without_counts_is_counted_and_still_correct(tmp_path: Path) -> None:
    """No counts in the lines: the byte count gives the same totals, compaction included."""
    ws = Workspace(tmp_path)
    with ws.create() as s, s.begin_run() as run:
        for t in range(20):
            exchange(run, t)
    ws.compact(s.id, "early", keep_last=2)
    with Session.open(ws.path(s.id)) as again, again.begin_run() as run:
        for t in range(20, 30):
            exchange(run, t)
    path = ws.path(s.id)
    expected = folded(tmp_path, s.id)
    assert expected == (1 + 2 + 20, 60)
    strip_counts(path)
    assert b'"messages":' not in path.read_bytes()
    page = Workspace(tmp_path).messages(s.id, last=4)
    assert (page.total, page.messages_total) == expected
    page = Workspace(tmp_path).messages(s.id, last=100)  # reaches the old compaction
    assert (page.total, page.messages_total) == expected
    # A current writer appending to the old file counts what it found: no byte count then.
    with Session.open(path) as again, again.begin_run() as run:
        exchange(run, 30)
    expected = folded(tmp_path, s.id)
    assert expected == (1 + 2 + 22, 62)
    page = Workspace(tmp_path).messages(s.id, last=4)
    assert (page.total, page.messages_total) == expected


def test_counts_that_do_not_check_out_fall_back_to_counting(tmp_path: Path) -> None:
    """A hand-edited count or a compaction offset off a line start: counted, never trusted."""
    ws = Workspace(tmp_path)
    with ws.create() as s, s.begin_run() as run:
        for t in range(10):
            exchange(run, t)
    ws.compact(s.id, "early", keep_last=2)
    with Session.open(ws.path(s.id)) as again, again.begin_run() as run:
        for t in range(10, 20):
            exchange(run, t)
    path = ws.path(s.id)
    expected = folded(tmp_path, s.id)
    lines = path.read_bytes().splitlines(keepends=True)
    last = orjson.loads(lines[-2])
    assert last["type"] == "message_end"
    assert last["messages"] == 40
    for bad in ({"messages": "40"}, {"messages": -1}, {"compaction": last["compaction"] + 3}):
        edited = {**last, **bad}
        path.write_bytes(b"".join([*lines[:-2], orjson.dumps(edited) + b"\n", lines[-1]]))
        page = Workspace(tmp_path).messages(s.id, last=3)
        assert (page.total, page.messages_total) == expected, bad


def test_counts_are_top_level_keys_a_record_leaves_out(tmp_path: Path) -> None:
    """The counts sit beside ``data``: records, spans and followers see the host's data only."""
    with Session.create(tmp_path / "s.jsonl") as s, s.begin_run() as run:
        written = run.record(ev.message_end(None, UserMessage("hi")))
        s.annotate(ev.COMPACTION, {"summary": "so far"})
        run.record(ev.message_end(None, UserMessage("again")))
    assert written is not None
    lines = [orjson.loads(line) for line in (tmp_path / "s.jsonl").read_bytes().splitlines()]
    counted = [(o["type"], o.get("messages"), o.get("compaction")) for o in lines]
    compaction_offset = next(r.offset for r in read(tmp_path / "s.jsonl") if r.type == "compaction")
    assert counted == [
        ("session_start", None, None),
        ("run_start", None, None),
        ("message_end", 1, None),
        ("compaction", 1, None),
        ("message_end", 2, compaction_offset),
        ("run_close", None, None),
    ]
    first = next(r for r in read(tmp_path / "s.jsonl") if r.type == "message_end")
    assert dict(first.data) == dict(written.data)
    assert set(first.data) == {"message"}
    assert os.path.getsize(tmp_path / "s.jsonl") == s.size


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("messages"), st.integers(0, 30)),
        st.tuples(st.just("compact"), st.integers(0, 6)),
        st.tuples(st.just("side"), st.integers(0, 6)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("detach"), st.just(0)),
        st.tuples(st.just("cut"), st.integers(1, 4)),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, last=st.integers(0, 5), skip=st.integers(0, 5))
def test_any_history_pages_with_the_folded_counts(
    ops: list[tuple[str, int]], last: int, skip: int
) -> None:
    """Messages, compactions (file and side log), reopens, resumes and cuts at line ends."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        ws = Workspace(root)
        session = ws.create()
        path = ws.path(session.id)
        run = session.begin_run()
        t = 0
        side_at = 0  # the file's size when the side log was last written
        for op, n in ops:
            if op == "messages":
                for _ in range(n):
                    run.record(ev.message_end(None, UserMessage(f"message {t}")))
                    t += 1
            elif op == "compact":
                session.annotate(ev.COMPACTION, {"summary": f"up to {t}", "keep_last": n})
            elif op == "side":
                # As while another process writes: the fact goes to the side log.
                ws._annotate_side(path, ev.COMPACTION, {"summary": f"side {t}", "keep_last": n})
                side_at = path.stat().st_size
            elif op in ("reopen", "detach", "cut"):
                if op == "detach":
                    run.detach()
                    session.close()
                else:
                    run.close()
                    session.close()
                if op == "cut":
                    # A power loss: whole lines after the last sync gone (never before
                    # a side-log fact, which names the file's size when written).
                    lines = path.read_bytes().splitlines(keepends=True)
                    keep = max(1, len(lines) - n)
                    if sum(map(len, lines[:keep])) >= side_at:
                        path.write_bytes(b"".join(lines[:keep]))
                session = Session.open(path)
                open_run = session._open_run_id
                run = session.resume_run(open_run) if open_run else session.begin_run()
        run.close()
        session.close()
        visible, committed = folded(root, session.id)
        page = Workspace(root).messages(session.id, last=last, skip=skip)
        assert (page.total, page.messages_total) == (visible, committed)
        assert page.has_more == (visible > skip + last)
        assert len(page.messages) == max(0, min(last, visible - skip))
        assert committed == sum(r.type == "message_end" for r in read(path))

"""The workspace: listing, paging, appended metadata, status from the lock, artifacts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loopscribe import (
    AssistantMessage,
    Execution,
    Session,
    SessionLockedError,
    SystemMessage,
    TextContent,
    Usage,
    UserMessage,
    Workspace,
    read,
)
from loopscribe import events as ev
from loopscribe.cli import main
from loopscribe.live import follow
from loopscribe.workspace import SessionNotFoundError


def converse(session: Session, turns: int, *, tag: str = "") -> None:
    """Record ``turns`` user/assistant exchanges with usage in one run."""
    with session.begin_run() as run:
        for t in range(turns):
            model = Execution(f"m{t}", "model")
            run.record(ev.message_end(None, UserMessage(f"{tag}question {t}")))
            run.record(ev.model_exec_start(model, "demo-1"))
            reply = AssistantMessage((TextContent(f"{tag}answer {t}"),), usage=Usage(10, 2))
            run.record(ev.model_exec_end(model, message=reply, usage=reply.usage))
            run.record(ev.message_end(model, reply))


def texts(messages: list[object]) -> list[str]:
    """The text of each message."""
    out = []
    for m in messages:
        if isinstance(m, UserMessage | SystemMessage):
            out.append(str(m.content))
        elif isinstance(m, AssistantMessage):
            out.append(m.text)
    return out


def test_create_list_and_get_derive_summaries_from_records(tmp_path: Path) -> None:
    """Metadata, message counts and token usage come from the records; newest first."""
    ws = Workspace(tmp_path)
    with ws.create(title="first", model="demo-1", role="main", skills=["web"]) as a:
        converse(a, 2)
    time.sleep(0.01)
    with ws.create(title="second", agent_name="helper", color="blue") as b:
        converse(b, 1)
    with ws.create(title="child", parent_id=a.id) as c:
        converse(c, 1)
    listed = ws.list()
    assert [s.title for s in listed] == ["second", "first"]
    assert {s.title for s in ws.list(include_children=True)} == {"first", "second", "child"}
    first = ws.get(a.id)
    assert (first.message_count, first.input_tokens, first.output_tokens) == (4, 20, 4)
    assert (first.model, first.role, first.skills, first.runs) == ("demo-1", "main", ("web",), 1)
    assert first.status == "idle"
    assert first.path == tmp_path / f"{a.id}.jsonl"
    assert ws.get(c.id).parent_id == a.id
    with pytest.raises(ValueError, match="unknown session field"):
        ws.create(titel="typo")
    with pytest.raises(SessionNotFoundError):
        ws.get("0" * 32)


def test_warm_listing_reads_no_unchanged_file_and_grown_files_advance(tmp_path: Path) -> None:
    """A second listing reads nothing; a grown file is read from where it stopped."""
    ws = Workspace(tmp_path)
    ids = []
    for i in range(3):
        with ws.create(title=f"s{i}") as s:
            converse(s, 1)
            ids.append(s.id)
    ws.list()
    assert ws.files_read == 3
    ws.list()
    assert ws.files_read == 3
    path = ws.path(ids[0])
    before = path.stat().st_size
    with Session.open(path) as s:
        converse(s, 2)
    assert ws.get(ids[0]).message_count == 6
    assert ws.files_read == 4
    # A rewritten (shrunk) file is folded anew, not extended.
    path.write_bytes(path.read_bytes()[:before])
    assert ws.get(ids[0]).message_count == 2


def test_messages_page_across_lines_longer_than_a_read_block(tmp_path: Path) -> None:
    """Records far longer than the backward read block never hide or garble messages."""
    ws = Workspace(tmp_path)
    with ws.create() as s, s.begin_run() as run:
        for i in range(40):
            size = (i * 37_001) % 150_000  # around and across the 64 KiB block size
            run.record(ev.message_end(None, UserMessage(f"m{i}:" + "x" * size)))
            tool = Execution(f"c{i}", "tool")
            run.record(ev.tool_exec_end(tool, "t", "y" * ((i * 65_536 + 1) % 140_001)))
    page = ws.messages(s.id, last=25, skip=5)
    expected = [f"m{i}" for i in range(10, 35)]
    assert [t.split(":")[0] for t in texts(page.messages)] == expected
    assert page.has_more


def test_messages_page_backwards_with_has_more(tmp_path: Path) -> None:
    """last/skip pages come out oldest first, with has_more telling whether older ones exist."""
    ws = Workspace(tmp_path)
    with ws.create() as s:
        converse(s, 5)
    page = ws.messages(s.id, last=3)
    assert texts(page.messages) == ["answer 3", "question 4", "answer 4"]
    assert page.has_more
    assert page.total == 10  # always known: the summary counts them
    assert ws.get(s.id).message_count == 10
    assert ws.messages(s.id, last=3).total == 10  # known once the summary is current
    older = ws.messages(s.id, last=3, skip=3)
    assert texts(older.messages) == ["question 2", "answer 2", "question 3"]
    assert older.has_more
    oldest = ws.messages(s.id, last=5, skip=6)
    assert texts(oldest.messages) == ["question 0", "answer 0", "question 1", "answer 1"]
    assert not oldest.has_more
    everything = ws.messages(s.id, last=100)
    assert len(everything.messages) == 10
    assert not everything.has_more


def test_update_todos_and_compaction_are_appended_records(tmp_path: Path) -> None:
    """Metadata changes append records; after compaction, messages start with the summary."""
    ws = Workspace(tmp_path)
    with ws.create(title="old") as s:
        converse(s, 2)
    original = ws.path(s.id).read_bytes()
    assert ws.update(s.id, title="new", state="done").title == "new"
    todos = [{"id": "1", "text": "write tests", "status": "open"}]
    assert ws.set_todos(s.id, todos).todos == tuple(todos)
    summary = ws.compact(s.id, "They asked two questions.")
    assert summary.compaction is not None
    assert summary.compaction.messages_before == 4
    assert ws.path(s.id).read_bytes().startswith(original)  # appended, never rewritten
    with Session.open(ws.path(s.id)) as again:
        converse(again, 1, tag="after ")
    page = ws.messages(s.id, last=10)
    assert texts(page.messages) == [
        "They asked two questions.",
        "after question 0",
        "after answer 0",
    ]
    assert not page.has_more
    assert page.total == 3
    kinds = [r.type for r in read(ws.path(s.id))]
    assert {"session_update", "todos", "compaction"} <= set(kinds)
    assert ws.get(s.id).state == "done"


def test_update_goes_through_this_process_handle(tmp_path: Path) -> None:
    """While this process writes a session, updates append through its own open handle."""
    ws = Workspace(tmp_path)
    with ws.create(title="live") as s, s.begin_run() as run:
        ws.update(s.id, title="renamed")
        run.record(ev.turn_start(Execution("t", "turn"), 1))
        assert ws.get(s.id).title == "renamed"
        assert ws.status(s.id) == "running"
    types = [r.type for r in read(ws.path(s.id))]
    assert types.index("session_update") < types.index("turn_start")


def test_delete_is_refused_while_running_and_removes_everything_after(tmp_path: Path) -> None:
    """A running session cannot be deleted; an idle one goes with its artifacts and exports."""
    ws = Workspace(tmp_path)
    s = ws.create()
    with pytest.raises(SessionLockedError, match="running"):
        ws.delete(s.id)
    s.close()
    folder = ws.artifact_dir(s.id)
    (folder / "charts").mkdir(parents=True)
    (folder / "charts" / "a.png").write_bytes(b"x" * 10)
    (folder / "report.md").write_text("hi")
    arts = ws.artifacts(s.id)
    assert [(a.name, a.size) for a in arts] == [("charts/a.png", 10), ("report.md", 2)]
    ws.path(s.id).with_name(ws.path(s.id).name + ".otlp.jsonl").write_text("")
    ws.delete(s.id)
    assert list(tmp_path.iterdir()) == []
    assert ws.list() == []


WRITER = textwrap.dedent(
    """
    import sys, time
    from loopscribe import Session, Execution, UserMessage
    from loopscribe import events as ev
    session = Session.open(sys.argv[1])
    run = session.begin_run()
    print("ready", flush=True)
    i = 0
    while True:
        run.record(ev.message_end(None, UserMessage("x" * (i % 7 * 3000) + str(i))))
        i += 1
        time.sleep(0.002)
    """
)


def test_status_and_follow_with_a_writer_in_another_process(tmp_path: Path) -> None:
    """Running while a child writes, interrupted after SIGKILL, idle after a clean reopen."""
    ws = Workspace(tmp_path)
    with ws.create(title="child-written") as s:
        pass
    path = ws.path(s.id)
    assert ws.status(s.id) == "idle"
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            assert ws.status(s.id) == "running"
            seen = []
            for record in follow(path, idle_timeout=2, poll_interval=0.001):
                seen.append(record.seq)
                if len(seen) >= 150:
                    break
            assert seen == list(range(seen[0], seen[0] + len(seen)))
            for _ in range(20):
                summary = ws.get(s.id)  # lists a growing file: never a partial line
                assert summary.status == "running"
                page = ws.messages(s.id, last=5)
                assert len(page.messages) == 5
            assert main(["tail", str(path), "-n", "3"]) == 0
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
        finally:
            child.kill()
    assert ws.status(s.id) == "interrupted"
    Session.open(path).close()
    assert ws.status(s.id) == "interrupted"  # reopening does not finish the old run
    with Session.open(path) as again, again.begin_run():
        pass
    assert ws.status(s.id) == "idle"


def test_cli_ls_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`loopscribe ls` lists the workspace and `show` prints the last messages."""
    ws = Workspace(tmp_path)
    with ws.create(title="cli demo") as s:
        converse(s, 3)
    assert main(["ls", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cli demo" in out
    assert "idle" in out
    assert main(["show", str(ws.path(s.id)), "--last", "2"]) == 0
    out = capsys.readouterr().out
    assert "question 2" in out
    assert "answer 2" in out
    assert "question 1" not in out
    assert main(["--json", "ls", str(tmp_path)]) == 0
    assert '"message_count":6' in capsys.readouterr().out

"""What a UI relies on from a workspace: status, metadata from another process, compaction."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from loopscribe import (
    AssistantMessage,
    Execution,
    Session,
    SystemMessage,
    TextContent,
    UserMessage,
    Workspace,
    read,
)
from loopscribe import events as ev
from loopscribe.workspace import NotASessionError

from .scripted import scripted


def exchange(run: object, t: int) -> None:
    """Commit one user message and one reply in ``run``."""
    assert hasattr(run, "record")
    model = Execution(f"m{t}", "model")
    run.record(ev.message_end(None, UserMessage(f"question {t}")))
    run.record(ev.message_end(model, AssistantMessage((TextContent(f"answer {t}"),))))


def text_of(message: object) -> str:
    """The text of a user, system or assistant message."""
    if isinstance(message, UserMessage | SystemMessage):
        return str(message.content)
    assert isinstance(message, AssistantMessage)
    return message.text


def test_status_running_only_while_a_run_is_open(tmp_path: Path) -> None:
    """Open between turns is idle; an open run is running; an error-ended run is failed."""
    ws = Workspace(tmp_path)
    s = ws.create()
    assert ws.status(s.id) == "idle"  # the writer holds the file, but no run is open
    run = s.begin_run()
    assert ws.status(s.id) == "running"
    agent = Execution("agent", "agent")
    run.record(ev.agent_start(agent, "a"))
    run.record(ev.agent_end(agent, "a", stop_reason="error", error="ModelError"))
    run.close()
    assert ws.status(s.id) == "failed"
    with s.begin_run() as ok:
        ok.record(ev.agent_start(agent, "a"))
        nested = Execution("sub", "agent", parent_id="agent")
        ok.record(ev.agent_end(nested, "sub", error="ToolError"))  # nested: not the run's outcome
        ok.record(ev.agent_end(agent, "a", stop_reason="stop"))
    assert ws.status(s.id) == "idle"
    with s.begin_run() as standalone:
        call = Execution("classify", "model")
        standalone.record(ev.model_exec_end(call, error=TimeoutError("slow")))
    assert ws.status(s.id) == "failed"  # a standalone call's failure ends its run in error
    with s.begin_run() as standalone:
        standalone.record(ev.model_exec_end(call, message=AssistantMessage()))
    assert ws.get(s.id).status == "idle"
    s.close()
    assert [x.status for x in ws.list()] == ["idle"]


AGENT = textwrap.dedent(
    """
    import sys, time
    from loopscribe import Session, Execution, UserMessage, AssistantMessage, TextContent
    from loopscribe import events as ev
    s = Session.open(sys.argv[1])
    run = s.begin_run()
    def exchange(t):
        run.record(ev.message_end(None, UserMessage(f"question {t}")))
        m = Execution(f"m{t}", "model")
        run.record(ev.message_end(m, AssistantMessage((TextContent(f"answer {t}"),))))
    for t in range(4):
        exchange(t)
    print("ready", flush=True)
    sys.stdin.readline()  # the UI process compacts and renames meanwhile
    for t in range(4, 6):
        exchange(t)
    run.close()
    s.close()
    print("done", flush=True)
    """
)

UI = textwrap.dedent(
    """
    import sys
    from loopscribe import Workspace
    ws = Workspace(sys.argv[1])
    ws.set_todos(sys.argv[2], [{"id": "1", "text": "from the other UI", "status": "open"}])
    """
)


def test_metadata_from_another_process_while_the_agent_writes(tmp_path: Path) -> None:
    """Rename, todos and compaction from UI processes land while an agent process records."""
    ws = Workspace(tmp_path)
    with ws.create(title="draft") as s:
        pass
    path = ws.path(s.id)
    with scripted(AGENT, str(path)) as agent:
        assert ws.status(s.id) == "running"
        assert ws.update(s.id, title="Trip to Lisbon").title == "Trip to Lisbon"
        other = subprocess.run(
            [sys.executable, "-c", UI, str(tmp_path), s.id], check=True, timeout=60
        )
        assert other.returncode == 0
        summary = ws.compact(s.id, "they talked about Lisbon", keep_last=2)
        assert summary.compaction is not None
        assert summary.compaction.summary == "they talked about Lisbon"
        assert summary.message_count == 3  # the summary and the two kept
        assert summary.messages_total == 8
        agent.go()
        assert agent.said() == "done"
    # The agent's file holds only its own records; the UI's facts are folded in.
    assert not [r for r in read(path) if r.type in ("session_update", "todos", "compaction")]
    fresh = Workspace(tmp_path)  # another reader, with a cold cache
    got = fresh.get(s.id)
    assert got.title == "Trip to Lisbon"
    assert [t["text"] for t in got.todos] == ["from the other UI"]
    assert got.status == "idle"
    assert got.message_count == 3 + 4
    assert got.messages_total == 12
    page = fresh.messages(s.id, last=50)
    assert [text_of(m) for m in page.messages] == [
        "they talked about Lisbon",
        "question 3",
        "answer 3",
        "question 4",
        "answer 4",
        "question 5",
        "answer 5",
    ]
    assert page.total == 7
    assert [x.title for x in fresh.list()] == ["Trip to Lisbon"]
    # A later change in the file itself (nobody writes now) wins over the older side-log one.
    assert fresh.update(s.id, title="Lisbon, final").title == "Lisbon, final"
    fresh.delete(s.id)
    assert list(tmp_path.iterdir()) == []


def test_compaction_keeps_the_last_messages_verbatim(tmp_path: Path) -> None:
    """keep_last N shows summary + N kept + later; counts say what a reader sees and the total."""
    ws = Workspace(tmp_path)
    with ws.create() as s, s.begin_run() as run:
        for t in range(3):
            exchange(run, t)
    ws.compact(s.id, "summary of 0-2", keep_last=3)
    with Session.open(ws.path(s.id)) as again, again.begin_run() as run:
        exchange(run, 3)
    summary = ws.get(s.id)
    assert summary.message_count == 1 + 3 + 2
    assert summary.messages_total == 8
    assert summary.compaction is not None
    assert (summary.compaction.summary, summary.compaction.keep_last) == ("summary of 0-2", 3)
    page = Workspace(tmp_path).messages(s.id, last=4)  # cold cache, page short of the start
    assert [text_of(m) for m in page.messages] == [
        "question 2",
        "answer 2",
        "question 3",
        "answer 3",
    ]
    assert page.has_more
    assert page.total == 6
    everything = ws.messages(s.id, last=100)
    assert text_of(everything.messages[0]) == "summary of 0-2"
    assert text_of(everything.messages[1]) == "answer 1"
    assert not everything.has_more
    with pytest.raises(ValueError, match="keep_last"):
        ws.compact(s.id, "x", keep_last=-1)


def test_messages_total_is_always_given(tmp_path: Path) -> None:
    """A page that stops short of the start still carries the total, even on a cold cache."""
    ws = Workspace(tmp_path)
    with ws.create() as s, s.begin_run() as run:
        for t in range(10):
            exchange(run, t)
    page = Workspace(tmp_path).messages(s.id, last=2)
    assert page.has_more
    assert page.total == 20


def test_a_file_that_is_not_a_session_fails_every_method_clearly(tmp_path: Path) -> None:
    """A first line that is no session header raises NotASessionError naming the file."""
    ws = Workspace(tmp_path)
    with ws.create() as good:
        pass
    bad_id = "f" * 32
    bad = tmp_path / f"{bad_id}.jsonl"
    bad.write_bytes(b'{"role":"user","content":"hello"}\n{"role":"assistant"}\n')
    calls: dict[str, Callable[[], object]] = {
        "list": ws.list,
        "get": lambda: ws.get(bad_id),
        "status": lambda: ws.status(bad_id),
        "messages": lambda: ws.messages(bad_id),
        "update": lambda: ws.update(bad_id, title="x"),
        "set_todos": lambda: ws.set_todos(bad_id, []),
        "compact": lambda: ws.compact(bad_id, "x"),
        "delete": lambda: ws.delete(bad_id),
        "artifacts": lambda: ws.artifacts(bad_id),
    }
    for name, call in calls.items():
        with pytest.raises(NotASessionError, match=bad.name) as info:
            call()
        assert "not a loopscribe session file" in str(info.value), name
        assert info.value.line == 1
    assert bad.read_bytes().startswith(b'{"role":"user"')  # nothing was appended to it
    bad.write_bytes(b"")  # a session being created: left out of the list, not an error
    assert [x.id for x in ws.list()] == [good.id]


def test_channel_sessions_are_listed_only_when_asked_and_titles_derive(tmp_path: Path) -> None:
    """source='channel' hides a session from list(); an untitled one is named by its first ask."""
    ws = Workspace(tmp_path)
    with ws.create(source="channel") as channel:
        pass
    with ws.create() as untitled, untitled.begin_run() as run:
        run.record(ev.message_end(None, SystemMessage("You are terse.")))
        long = "Plan   a three-day trip\nto Lisbon " + "with lots of detail " * 10
        run.record(ev.message_end(None, UserMessage(long)))
    assert [x.id for x in ws.list()] == [untitled.id]
    assert {x.id for x in ws.list(include_channels=True)} == {channel.id, untitled.id}
    title = ws.get(untitled.id).title
    assert title is not None
    assert title.startswith("Plan a three-day trip to Lisbon with lots")
    assert len(title) == 80
    assert title.endswith("…")
    assert ws.update(untitled.id, title="Lisbon").title == "Lisbon"


def test_a_crashed_run_stays_interrupted_while_this_process_reopens_the_file(
    tmp_path: Path,
) -> None:
    """Reopened between turns after a crash, the old open run is interrupted, not running."""
    ws = Workspace(tmp_path)
    s = ws.create()
    path = ws.path(s.id)
    s.begin_run().detach()  # what a crash leaves: a run without run_close
    s.close()
    assert ws.status(s.id) == "interrupted"
    with Session.open(path) as again:
        assert ws.status(s.id) == "interrupted"
        with again.begin_run():
            assert ws.status(s.id) == "running"
        assert ws.status(s.id) == "idle"


REOPENER = textwrap.dedent(
    """
    import sys
    from loopscribe import Session
    s = Session.open(sys.argv[1])   # after a crash: the old run is still open in the file
    print("ready", flush=True)
    sys.stdin.readline()
    run = s.begin_run()
    print("running", flush=True)
    sys.stdin.readline()
    run.close()
    print("idle", flush=True)
    sys.stdin.readline()
    s.close()
    """
)

CRASHER = textwrap.dedent(
    """
    import os, signal, sys
    from loopscribe import Session
    s = Session.open(sys.argv[1])
    s.begin_run()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_writer_in_another_process_between_turns_after_a_crash(tmp_path: Path) -> None:
    """A crashed run stays interrupted while another process holds the file with no run open."""
    ws = Workspace(tmp_path)
    with ws.create() as s:
        pass
    path = ws.path(s.id)
    crashed = subprocess.run([sys.executable, "-c", CRASHER, str(path)], check=False, timeout=60)
    assert crashed.returncode == -9
    assert ws.status(s.id) == "interrupted"
    with scripted(REOPENER, str(path)) as child:
        seen = [("reopened", ws.status(s.id))]  # it said ready: the crashed run still open
        for _ in range(2):
            child.go()
            seen.append((child.said(), ws.status(s.id)))
        child.go()
        assert child.process.wait(timeout=30) == 0
    assert seen == [("reopened", "interrupted"), ("running", "running"), ("idle", "idle")]


def test_a_fresh_workspace_counts_the_total_without_folding(tmp_path: Path) -> None:
    """The byte-search total equals the folded summary's count, compactions included."""
    ws = Workspace(tmp_path)
    with ws.create() as s, s.begin_run() as run:
        for t in range(6):
            exchange(run, t)
    ws.compact(s.id, "early part", keep_last=3)
    with Session.open(ws.path(s.id)) as again, again.begin_run() as run:
        for t in range(6, 12):
            exchange(run, t)
    expected = ws.get(s.id).message_count
    assert expected == 1 + 3 + 12
    page = Workspace(tmp_path).messages(s.id, last=2)
    assert page.total == expected
    assert Workspace(tmp_path).messages(s.id, last=2, skip=3).total == expected
    # A compaction from the side log (as while another process writes) is counted too.
    ws._annotate_side(ws.path(s.id), ev.COMPACTION, {"summary": "all so far", "keep_last": 1})
    with Session.open(ws.path(s.id)) as again, again.begin_run() as run:
        exchange(run, 12)
    folded = Workspace(tmp_path).get(s.id).message_count
    assert folded == 1 + 1 + 2
    assert Workspace(tmp_path).messages(s.id, last=1).total == folded


def test_the_byte_count_ignores_record_lookalikes_inside_data(tmp_path: Path) -> None:
    """Tool output holding a copy of a message_end record is not counted as a message."""
    ws = Workspace(tmp_path)
    lookalike = {"session_id": "a" * 32, "seq": 7, "type": "message_end", "data": {}}
    with ws.create() as s, s.begin_run() as run:
        for t in range(4):
            exchange(run, t)
            tool = Execution(f"c{t}", "tool")
            run.record(ev.tool_exec_start(tool, "cat", {"echo": lookalike, "also": [lookalike]}))
            run.record(ev.tool_exec_end(tool, "cat", {"records": [lookalike] * 3}))
    page = Workspace(tmp_path).messages(s.id, last=1)
    assert page.total == 8 == ws.get(s.id).message_count

"""Every status at once, each session written by a real process of its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from loopscribe import Workspace
from loopscribe.workspace import session_status

WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from loopscribe import Execution, Session, UserMessage
    from loopscribe import events as ev
    mode = sys.argv[2]
    s = Session.open(sys.argv[1])
    agent = Execution("agent", "agent")

    def turn(error):
        with s.begin_run() as run:
            run.record(ev.agent_start(agent, "a"))
            run.record(ev.message_end(None, UserMessage("hello")))
            run.record(ev.agent_end(agent, "a", error=error))

    if mode == "running":
        run = s.begin_run()
        run.record(ev.agent_start(agent, "a"))
    elif mode == "idle":
        turn(None)  # then kept open between turns
    elif mode == "failed":
        turn("ModelError")
    elif mode == "interrupted":
        run = s.begin_run()
        run.record(ev.agent_start(agent, "a"))
        os.kill(os.getpid(), signal.SIGKILL)
    print("ready", flush=True)
    sys.stdin.readline()
    if mode == "running":
        run.record(ev.agent_end(agent, "a"))
        run.close()
    elif mode == "failed":
        turn(None)  # the next turn succeeds
    print("done", flush=True)
    sys.stdin.readline()
    s.close()
    """
)

MODES = ("running", "idle", "failed", "interrupted")


def test_each_status_from_writers_in_other_processes(tmp_path: Path) -> None:
    """running, idle, failed and interrupted read right by a UI process, then as they change."""
    ws = Workspace(tmp_path)
    ids: dict[str, str] = {}
    for mode in MODES:
        with ws.create(title=mode) as s:
            ids[mode] = s.id
    children: dict[str, subprocess.Popen[str]] = {}
    try:
        for mode in MODES:
            children[mode] = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(ws.path(ids[mode])), mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        for mode, child in children.items():
            assert child.stdout is not None
            if mode == "interrupted":
                assert child.wait(timeout=60) == -signal.SIGKILL
            else:
                assert child.stdout.readline().strip() == "ready"
        listed = {s.title: s.status for s in Workspace(tmp_path).list()}
        assert listed == {mode: mode for mode in MODES}
        assert {m: session_status(ws.path(ids[m])) for m in MODES} == {m: m for m in MODES}
        for mode in ("running", "failed"):
            child = children[mode]
            assert child.stdin is not None
            assert child.stdout is not None
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done"
        # The open run closed; the failed session's next run succeeded; the writers
        # still hold their files between turns.
        after = {s.title: s.status for s in ws.list()}
        assert after == {
            "running": "idle",
            "idle": "idle",
            "failed": "idle",
            "interrupted": "interrupted",
        }
        for mode in ("running", "idle", "failed"):
            child = children[mode]
            assert child.stdin is not None
            child.stdin.write("close\n")
            child.stdin.flush()
            if mode == "idle":
                assert child.stdout is not None
                assert child.stdout.readline().strip() == "done"
                child.stdin.write("close\n")
                child.stdin.flush()
            assert child.wait(timeout=60) == 0
    finally:
        for child in children.values():
            child.kill()
            child.wait(timeout=60)
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()
    assert {s.title: s.status for s in Workspace(tmp_path).list()}["interrupted"] == "interrupted"

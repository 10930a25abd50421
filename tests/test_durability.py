"""Write path, fsync points, sticky failures and the single-writer lock."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopscribe import (
    Event,
    Execution,
    ForkedWriterError,
    Session,
    SessionLockedError,
    WriteError,
    read,
)

EX = Execution("c", "tool")


class Calls:
    """Counts os.write and os.fsync calls, and what they were made on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[int] = []
        self.fsyncs: list[str] = []
        real_write, real_fsync = os.write, os.fsync

        def write(fd: int, data: bytes) -> int:
            self.writes.append(fd)
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            self.fsyncs.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
            real_fsync(fd)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)


def test_one_write_per_record_on_o_append_and_no_fsync_per_event(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each record is one os.write on an O_APPEND descriptor; events are not fsynced."""
    calls = Calls(monkeypatch)
    s = Session.create(session_path)
    assert calls.fsyncs == ["file", "dir"]  # create syncs the file and its directory
    assert fcntl.fcntl(s._fd, fcntl.F_GETFL) & os.O_APPEND
    run = s.begin_run()
    before = len(calls.writes)
    for i in range(50):
        run.record(Event("tool_exec_start", EX, {"i": i, "pad": "x" * (i * 100)}))
    assert len(calls.writes) - before == 50
    assert calls.fsyncs == ["file", "dir"]
    run.save_checkpoint({"n": 50})
    assert calls.fsyncs == ["file", "dir", "file"]
    run.close()
    assert calls.fsyncs == ["file", "dir", "file", "file"]
    s.close()
    assert calls.fsyncs == ["file", "dir", "file", "file", "file"]


def fail_writes_after(monkeypatch: pytest.MonkeyPatch, partial: bool) -> Callable[[], None]:
    """Make the next os.write write half its data (if partial) and then fail with ENOSPC."""
    real_write = os.write
    state = {"armed": False, "calls": 0}

    def write(fd: int, data: bytes) -> int:
        if not state["armed"]:
            return real_write(fd, data)
        state["calls"] += 1
        if partial and state["calls"] == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)

    def arm() -> None:
        state["armed"] = True

    return arm


@pytest.mark.parametrize("partial", [True, False])
def test_failed_write_is_sticky_and_leaves_a_line_boundary(
    session_path: Path, monkeypatch: pytest.MonkeyPatch, partial: bool
) -> None:
    """A short or failed write raises, cuts any partial line, and fails every later call."""
    arm = fail_writes_after(monkeypatch, partial)
    s = Session.create(session_path)
    run = s.begin_run()
    run.record(Event("tool_exec_start", EX, {"ok": 1}))
    good = session_path.read_bytes()
    arm()
    with pytest.raises(WriteError) as first:
        run.record(Event("tool_exec_start", EX, {"pad": "y" * 5000}))
    assert first.value.errno == errno.ENOSPC
    assert session_path.read_bytes() == good  # no partial line left behind
    monkeypatch.undo()  # the disk has space again: the handle must still refuse
    with pytest.raises(WriteError) as again:
        run.record(Event("tool_exec_start", EX, {"ok": 2}))
    assert again.value is first.value
    with pytest.raises(WriteError):
        run.record(Event("message_update", EX, {}))  # even a transient event reports it
    with pytest.raises(WriteError) as on_close:
        s.close()
    assert on_close.value is first.value
    assert session_path.read_bytes() == good
    with Session.open(session_path) as reopened:
        assert reopened.next_seq == 3


def test_fsync_failure_is_sticky_and_never_retried(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed fsync fails the handle; close raises it again instead of syncing anew."""
    s = Session.create(session_path)
    run = s.begin_run()
    attempts: list[int] = []

    def fsync(fd: int) -> None:
        attempts.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(WriteError, match="fsync failed") as first:
        run.save_checkpoint({"x": 1})
    with pytest.raises(WriteError) as on_close:
        s.close()
    assert on_close.value is first.value
    assert len(attempts) == 1


def test_unencodable_data_is_not_sticky(session_path: Path) -> None:
    """Data JSON cannot hold is diagnosed in its record; the next record is written as usual."""
    s = Session.create(session_path)
    run = s.begin_run()
    bad: dict[Any, Any] = {1: "non-string key"}
    run.record(Event("tool_exec_start", EX, bad))
    run.record(Event("tool_exec_start", EX, {"fine": True}))
    s.close()
    data = [r.data for r in read(session_path) if r.type == "tool_exec_start"]
    assert "non-string key" in data[0]["snapshot_error"]
    assert data[1] == {"fine": True}


def test_second_handle_in_the_same_process_is_refused(session_path: Path) -> None:
    """The writer lock is per handle: a second open in this process fails at once."""
    with (
        Session.create(session_path),
        pytest.raises(SessionLockedError, match="another Session handle"),
    ):
        Session.open(session_path)
    Session.open(session_path).close()  # free again after close


HOLD = textwrap.dedent(
    """
    import sys, time
    from loopscribe import Session
    s = Session.open(sys.argv[1])
    print("locked", flush=True)
    time.sleep(60)
    """
)


def test_another_process_is_refused_and_sigkill_leaves_no_stale_lock(session_path: Path) -> None:
    """A second process gets SessionLockedError; once the writer is SIGKILLed the lock is free."""
    Session.create(session_path).close()
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(session_path)], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "locked"
            with pytest.raises(SessionLockedError):
                Session.open(session_path)
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
            Session.open(session_path).close()
        finally:
            child.kill()


def test_a_forked_child_cannot_append(session_path: Path) -> None:
    """A child process that inherits the handle is refused instead of interleaving records."""
    s = Session.create(session_path)
    run = s.begin_run()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            run.record(Event("tool_exec_start", EX, {}))
            os.write(write_end, b"appended")
        except ForkedWriterError:
            os.write(write_end, b"refused")
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    assert os.read(read_end, 100) == b"refused"
    os.close(read_end)
    run.record(Event("tool_exec_start", EX, {}))
    s.close()
    assert [r.seq for r in read(session_path)] == [0, 1, 2, 3]


def test_run_close_without_sync_leaves_the_fsync_to_session_close(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close(sync=False) writes run_close without an fsync; the session's close syncs it."""
    s = Session.create(session_path)
    calls = Calls(monkeypatch)
    s.begin_run().close(sync=False)
    assert calls.fsyncs == []
    s.close()
    assert calls.fsyncs == ["file"]
    assert [r.type for r in read(session_path)][-1] == "run_close"


def test_buffered_writes_go_out_in_blocks_before_every_fsync(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The importers' bulk mode: lines wait in a block, which is written before any fsync."""
    s = Session.create(session_path, buffered=True)
    calls = Calls(monkeypatch)
    run = s.begin_run()
    for i in range(250):
        run.record(Event("tool_exec_start", EX, {"i": i, "pad": "x" * 10_000}))
    # About 2.4 MiB of records: two full blocks so far, the rest still waiting.
    assert len(calls.writes) == 2
    on_disk = session_path.stat().st_size
    assert 0 < on_disk < s.size
    assert session_path.read_bytes().endswith(b"\n")
    run.save_checkpoint({"n": 250})  # the checkpoint is synced with everything before it
    assert session_path.stat().st_size == s.size
    assert calls.fsyncs == ["file"]
    assert s.load_checkpoint() == {"n": 250}
    run.close()
    s.close()
    assert [r.data.get("i") for r in read(session_path) if r.type == "tool_exec_start"] == list(
        range(250)
    )


def test_buffered_writes_are_refused_with_observers(session_path: Path) -> None:
    """Observers are promised records that are on disk: a buffering Session cannot keep that."""
    with pytest.raises(ValueError, match="observers"):
        Session.create(session_path, observers=[lambda record: None], buffered=True)
    assert not session_path.exists()
    with (
        Session.create(session_path, buffered=True) as s,
        pytest.raises(ValueError, match="observers"),
    ):
        s.add_observer(lambda record: None)


def test_a_failed_block_write_is_sticky_and_cuts_the_whole_block(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block written in part is cut back to where it began: the file ends on a line boundary."""
    arm = fail_writes_after(monkeypatch, partial=True)
    s = Session.create(session_path, buffered=True)
    run = s.begin_run()
    s.flush()
    good = session_path.read_bytes()
    for i in range(10):
        run.record(Event("tool_exec_start", EX, {"i": i, "pad": "x" * 100_000}))
    assert session_path.read_bytes() == good  # all ten are waiting in the block
    arm()
    with pytest.raises(WriteError) as failed:
        # The eleventh fills the block: half of it is written, then the disk is full.
        run.record(Event("tool_exec_start", EX, {"i": 10, "pad": "x" * 100_000}))
    assert session_path.read_bytes() == good
    monkeypatch.undo()
    with pytest.raises(WriteError) as again:
        run.record(Event("tool_exec_start", EX, {"i": 5}))
    assert again.value is failed.value
    with pytest.raises(WriteError):
        s.close()
    with Session.open(session_path) as reopened:
        assert reopened.next_seq == 2

"""Write faults injected through the OS (RLIMIT_FSIZE, a full tmpfs) and by patching os."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext

from loopscribe import Event, Execution, Session, Workspace, WriteError, read
from loopscribe.otel import OTLPJsonFileExporter

from ..scripted import scripted

EX = Execution("c", "tool")
PAD = "x" * 300

# The child sets RLIMIT_FSIZE just above the file's size after create, then
# records until a write fails. Python ignores SIGXFSZ, so the kernel returns a
# short write at the limit and EFBIG after it.
FSIZE_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from loopscribe import Event, Execution, Session, WriteError

    session = Session.create(sys.argv[1])
    run = session.begin_run()
    limit = session.size + int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    written = 0
    error = None
    for i in range(100_000):
        try:
            run.record(Event("tool_exec_start", Execution("c", "tool"), {"i": i, "pad": "x" * 300}))
        except WriteError as exc:
            error = exc
            break
        written += 1
    assert error is not None, "the size limit was never reached"
    size_after_failure = session.size
    try:
        run.record(Event("tool_exec_start", Execution("c", "tool"), {"i": -1}))
        again = False
    except WriteError as exc:
        again = exc is error
    try:
        session.close()
        closed_same = False
    except WriteError as exc:
        closed_same = exc is error
    print(json.dumps({
        "written": written, "errno": error.errno, "limit": limit, "again": again,
        "closed_same": closed_same, "closed": session.closed, "size": size_after_failure,
        "message": str(error),
    }))
    """
)


def assert_intact(path: Path, events: int) -> None:
    """The file ends on a line boundary and reopens to exactly the records before the failure."""
    data = path.read_bytes()
    assert data.endswith(b"\n")
    with Session.open(path) as session:
        assert session.size == len(data)
        assert session.next_seq == events + 2  # session_start and run_start first
    records = list(read(path))
    assert [r.seq for r in records] == list(range(events + 2))
    assert [r.data["i"] for r in records[2:]] == list(range(events))


def test_file_size_limit_fails_loudly_cuts_the_partial_line_and_stays_failed(
    tmp_path: Path,
) -> None:
    """Under RLIMIT_FSIZE the caller gets a sticky EFBIG WriteError and the file stays whole."""
    path = tmp_path / "limited.jsonl"
    out = subprocess.run(
        [sys.executable, "-c", FSIZE_CHILD, str(path), "5000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["errno"] == errno.EFBIG
    assert str(path) in result["message"]
    assert result["again"]
    assert result["closed_same"]
    assert result["closed"]
    assert result["written"] > 0
    # The record that crossed the limit was partly written and then cut back.
    assert path.stat().st_size == result["size"] < result["limit"]
    assert_intact(path, result["written"])


@contextmanager
def tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (as mount(8) takes it) on a fresh folder, unmounted afterwards."""
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    target = tmp_path / "mnt"
    target.mkdir()
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted on a fresh folder, unmounted afterwards."""
    with tmpfs(tmp_path, "1m") as target:
        yield target


def fill(folder: Path, *, leave: int = 0) -> Path:
    """Fill ``folder``'s file system to the last byte with one file, then free ``leave`` bytes.

    Files already there can still grow into the unused rest of their last
    page: a write that crosses into a new page is cut short there.
    """
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as stream:
        for chunk in (1 << 16, 1):
            with contextlib.suppress(OSError):
                while stream.write(b"\0" * chunk):
                    pass
        assert os.statvfs(folder).f_bavail == 0
        if leave:
            stream.truncate(filler.stat().st_size - leave)
    return filler


def test_full_tmpfs_raises_enospc_cuts_the_partial_line_and_stays_failed(
    full_tmpfs: Path,
) -> None:
    """On a full filesystem the caller gets a sticky ENOSPC WriteError and the file stays whole."""
    path = full_tmpfs / "full.jsonl"
    session = Session.create(path)
    run = session.begin_run()
    written = 0
    error: WriteError | None = None
    for i in range(100_000):
        try:
            run.record(Event("tool_exec_start", EX, {"i": i, "pad": PAD}))
        except WriteError as exc:
            error = exc
            break
        written += 1
    assert error is not None, "the filesystem never filled up"
    assert error.errno == errno.ENOSPC
    assert session.error is error
    with pytest.raises(WriteError) as again:
        run.record(Event("tool_exec_start", EX, {"i": -1}))
    assert again.value is error
    with pytest.raises(WriteError) as closing:
        session.close()
    assert closing.value is error
    assert session.closed
    assert path.stat().st_size == session.size
    assert_intact(path, written)


class FailingFsync:
    """Replaces os.fsync: fails with EIO on one descriptor and counts the calls on it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fd: int) -> None:
        self.fd = fd
        self.calls = 0
        real = os.fsync

        def fsync(target: int) -> None:
            if target != self.fd:
                real(target)
                return
            self.calls += 1
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fsync", fsync)


def test_failed_checkpoint_fsync_is_never_retried_into_success(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed fsync raises, stays sticky, and close re-raises it without calling fsync again."""
    session = Session.create(session_path)
    run = session.begin_run()
    run.record(Event("tool_exec_start", EX, {"i": 0}))
    fsync = FailingFsync(monkeypatch, session._fd)
    with pytest.raises(WriteError) as caught:
        run.save_checkpoint({"n": 1})
    error = caught.value
    assert error.errno == errno.EIO
    assert "fsync failed" in str(error)
    assert fsync.calls == 1
    with pytest.raises(WriteError) as again:
        run.record(Event("tool_exec_start", EX, {"i": 1}))
    assert again.value is error
    with pytest.raises(WriteError) as closing:
        session.close()
    assert closing.value is error
    assert fsync.calls == 1
    assert session.closed


def test_failed_close_fsync_raises_once_and_again_on_every_close(
    session_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync failing at Run.close reaches Session.close as the same error, fsync called once."""
    session = Session.create(session_path)
    run = session.begin_run()
    run.record(Event("tool_exec_start", EX, {"i": 0}))
    fsync = FailingFsync(monkeypatch, session._fd)
    with pytest.raises(WriteError) as caught:
        run.close()
    with pytest.raises(WriteError) as closing:
        session.close()
    assert closing.value is caught.value
    assert fsync.calls == 1
    monkeypatch.undo()
    records = list(read(session_path))
    assert [r.type for r in records] == [
        "session_start",
        "run_start",
        "tool_exec_start",
        "run_close",
    ]


@pytest.mark.parametrize("partial", [False, True], ids=["eio", "short-then-eio"])
def test_write_eio_is_sticky_and_leaves_whole_lines(
    session_path: Path, monkeypatch: pytest.MonkeyPatch, partial: bool
) -> None:
    """An EIO from os.write, after a short write or not, fails the handle; no partial line stays."""
    session = Session.create(session_path)
    run = session.begin_run()
    for i in range(3):
        run.record(Event("tool_exec_start", EX, {"i": i, "pad": PAD}))
    fd = session._fd
    real_write = os.write
    calls = {"n": 0}

    def write(target: int, data: bytes) -> int:
        if target != fd:
            return real_write(target, data)
        calls["n"] += 1
        if partial and calls["n"] == 1:
            return real_write(target, data[: len(data) // 2])
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(WriteError) as caught:
        run.record(Event("tool_exec_start", EX, {"i": 3, "pad": PAD}))
    assert caught.value.errno == errno.EIO
    assert calls["n"] == (2 if partial else 1)
    with pytest.raises(WriteError) as again:
        run.record(Event("tool_exec_start", EX, {"i": 4}))
    assert again.value is caught.value
    with pytest.raises(WriteError) as closing:
        session.close()
    assert closing.value is caught.value
    monkeypatch.undo()
    assert session_path.stat().st_size == session.size
    assert_intact(session_path, 3)


# -- files beside a session: the side log, the OTLP JSON file, an import --------------

HOLD = textwrap.dedent(
    """
    import sys
    from loopscribe import Session
    with Session.open(sys.argv[1]):
        print("ready", flush=True)
        sys.stdin.readline()
    """
)

# Renames a held session through its side log, with a long title each time, until a
# write fails; RLIMIT_FSIZE (given) stops the side log just past its current size.
RENAME_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    from loopscribe import Workspace
    ws = Workspace(sys.argv[1])
    side = ws.path(sys.argv[2]).with_name(sys.argv[2] + ".jsonl.meta")
    if len(sys.argv) > 3:
        limit = side.stat().st_size + int(sys.argv[3])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    for i in range(100_000):
        try:
            ws.update(sys.argv[2], title=f"title {i} " + "x" * 300)
        except OSError as exc:
            print(json.dumps({"renamed": i, "errno": exc.errno, "message": str(exc)}))
            break
    """
)


def _sessions(root: Path, count: int) -> list[str]:
    ws = Workspace(root)
    ids = []
    for n in range(count):
        with ws.create(title=f"session {n}") as session:
            ids.append(session.id)
    return ids


@pytest.mark.parametrize("fault", ["full tmpfs", "file-size limit"])
def test_a_side_log_write_cut_short_leaves_no_torn_line(tmp_path: Path, fault: str) -> None:
    """A side-log update that fails halfway is cut back; the next one lands, every session lists."""
    with contextlib.ExitStack() as stack:
        root = (
            stack.enter_context(tmpfs(tmp_path, "1m")) if fault == "full tmpfs" else tmp_path
        ) / "ws"
        ids = _sessions(root, 3)
        held = ids[1]
        side = root / f"{held}.jsonl.meta"
        agent = stack.enter_context(scripted(HOLD, str(root / f"{held}.jsonl")))
        Workspace(root).update(held, title="before")  # another process writes: the side log
        assert side.exists()
        if fault == "full tmpfs":
            filler = fill(root.parent)
            args = [str(root), held]
        else:
            args = [str(root), held, "1000"]
        child = subprocess.run(
            [sys.executable, "-c", RENAME_CHILD, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        failure = json.loads(child.stdout)
        assert failure["errno"] == (errno.ENOSPC if fault == "full tmpfs" else errno.EFBIG)
        assert failure["renamed"] > 0, "the first write already failed: nothing was cut short"
        assert str(side) in failure["message"]
        assert side.read_bytes().endswith(b"\n")  # the half-written fact was cut back
        if fault == "full tmpfs":
            filler.unlink()
        ws = Workspace(root)
        assert ws.update(held, title="after").title == "after"
        listed = Workspace(root).list()
        assert sorted(s.id for s in listed) == sorted(ids)
        assert {s.id: s.title for s in listed}[held] == "after"
        assert len(side.read_bytes().splitlines()) == failure["renamed"] + 2
        agent.go()


def _spans(count: int) -> list[ReadableSpan]:
    return [
        ReadableSpan(
            f"span {n}", context=SpanContext(1, n + 1, is_remote=False), attributes={"pad": PAD}
        )
        for n in range(count)
    ]


def test_an_otlp_json_file_export_cut_short_leaves_no_torn_line(full_tmpfs: Path) -> None:
    """An export that fails halfway on a full disk is cut back; after room is made exports go on."""
    target = full_tmpfs / "s.jsonl.otlp.jsonl"
    exporter = OTLPJsonFileExporter(target)
    try:
        assert exporter.export(_spans(1)) is SpanExportResult.SUCCESS
        filler = fill(full_tmpfs)
        exported = 1
        while exporter.export(_spans(3)) is SpanExportResult.SUCCESS:
            exported += 1
        assert exported > 1, "the first write already failed: nothing was cut short"
        assert target.read_bytes().endswith(b"\n")
        filler.unlink()
        assert exporter.export(_spans(2)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()  # the file closed, so the tmpfs can be unmounted
    lines = target.read_bytes().splitlines()
    assert len(lines) == exported + 1
    assert all(orjson.loads(line)["resourceSpans"] for line in lines)


def test_an_otlp_json_file_with_a_torn_last_line_is_cut_before_the_next_export(
    tmp_path: Path,
) -> None:
    """A line a crash left unfinished is removed before the next export appends."""
    target = tmp_path / "s.jsonl.otlp.jsonl"
    first = OTLPJsonFileExporter(target)
    assert first.export(_spans(1)) is SpanExportResult.SUCCESS
    first.shutdown()
    with open(target, "ab") as stream:
        stream.write(b'{"resourceSpans":[{"scope')  # a crash mid-write
    again = OTLPJsonFileExporter(target)
    assert again.export(_spans(2)) is SpanExportResult.SUCCESS
    again.shutdown()
    lines = target.read_bytes().splitlines()
    assert [
        len(orjson.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for line in lines
    ] == [1, 2]


TRANSCRIPTS = Path(__file__).parent.parent / "data" / "transcripts" / "claude-code"


def _import(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "loopscribe",
            "import",
            "claude-code",
            str(TRANSCRIPTS),
            "--out",
            str(out),
            "--settle",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize("room", [0, 600_000], ids=["no room", "room for half"])
def test_import_on_a_full_disk_is_one_line_and_the_next_import_completes(
    tmp_path: Path, room: int
) -> None:
    """A full disk stops ``import`` with one line; with room made, it imports every session."""
    reference = tmp_path / "reference"
    assert _import(reference).returncode == 0
    expected = sorted(
        (s.title, s.records) for s in Workspace(reference).list(include_children=True)
    )
    with tmpfs(tmp_path, "8m") as mnt:
        out = mnt / "imported"
        filler = fill(mnt, leave=room)
        done = _import(out)
        assert done.returncode == 1, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, done.stderr
        assert "No space left on device" in lines[0]
        assert "run the same command again" in lines[0]
        filler.unlink()
        done = _import(out)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        listed = Workspace(out).list(include_children=True)
        assert sorted((s.title, s.records) for s in listed) == expected
